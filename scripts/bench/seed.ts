// A long history on one grant, written straight into a stopped service's
// kernel.db (running 100,000 governed operations would take the bench most of
// an hour on this machine): each operation is inserted reserved and moved
// reserved → dispatch_committed → completed, its hold inserted reserved and
// consumed, through the store's own triggers (state guards, usage counters),
// so the grant's counters and indexes are what 100,000 real operations leave.
// Receipts, nonces, the supervisor's request log and the executor's ledger
// are not seeded: none of them is read per operation by grant.
import { createHash } from 'node:crypto';
import path from 'node:path';
import Database from 'better-sqlite3';

export function seedHistory(kernelDir: string, capabilityId: string, operations: number): { seconds: number } {
  const started = performance.now();
  const db = new Database(path.join(kernelDir, 'kernel.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    const grant = db.prepare('SELECT tool, subject FROM grants WHERE capability_id = ?').get(capabilityId) as { tool: string; subject: string };
    const tool = grant.tool.replace('/*', '/append');
    const insertOperation = db.prepare(`
      INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, capability_id, state, created_at, updated_at)
      VALUES (@id, @request, @hash, 'agent', @tool, @hash, 0, @capability, 'reserved', @now, @now)`);
    const move = db.prepare('UPDATE operations SET state = ?, updated_at = ? WHERE operation_id = ?');
    const insertHold = db.prepare(`
      INSERT INTO holds (hold_id, operation_id, capability_id, invocations, cost_units_held, created_at) VALUES (@hold, @id, @capability, 1, 0, @now)`);
    const consume = db.prepare(`UPDATE holds SET state = 'consumed', settled_at = @now, settled_by = @receipt WHERE hold_id = @hold`);
    const now = Date.now() - 1000;
    const seed = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const id = createHash('sha256').update(`seed-${i}`).digest('hex');
        const hash = id;
        insertOperation.run({ id, request: `seed-${i}`, hash, tool, capability: capabilityId, now });
        insertHold.run({ hold: `hold:${id}`, id, capability: capabilityId, now });
        move.run('dispatch_committed', now, id);
        move.run('completed', now, id);
        consume.run({ hold: `hold:${id}`, now, receipt: `r:${id}:2` });
      }
    });
    for (let from = 0; from < operations; from += 10_000) seed.immediate(from, Math.min(operations, from + 10_000));
  } finally {
    db.close();
  }
  return { seconds: (performance.now() - started) / 1000 };
}
