// A long history on one grant, written straight into a stopped service's
// stores (running 100,000 governed operations would take the bench most of
// an hour on this machine). kernel.db: each operation is inserted reserved
// and moved reserved → dispatch_committed → completed, its hold inserted
// reserved and consumed, through the store's own triggers (state guards,
// usage and hold counters), so the grant's counters and indexes are what
// 100,000 real operations leave; each has its own created_at, a millisecond
// apart, as operations the kernel records one after another do.
// supervisor.db: a settled request per operation, a copy of the newest real
// settled one (its artifacts, so its size) under the seeded names: what a
// start, a listing and a recovery would have to walk past. Receipts, nonces
// and the executor's ledger are not seeded: none of them is read per
// operation by grant, nor by a start.
import { createHash } from 'node:crypto';
import path from 'node:path';
import Database from 'better-sqlite3';

export function seedHistory(dirs: { readonly kernelDir: string; readonly supervisorDir: string }, capabilityId: string, operations: number): { seconds: number } {
  const { kernelDir } = dirs;
  const started = performance.now();
  // The seeded operations end a second before now, one millisecond apart; their requests carry the same times.
  const now = Date.now() - operations - 1000;
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
      INSERT INTO holds (operation_rowid, operation_id, capability_id, invocations, cost_units_held, created_at) VALUES (@row, @id, @capability, 1, 0, @now)`);
    const consume = db.prepare(`UPDATE holds SET state = 'consumed', settled_at = @now, settled_by = @receipt WHERE operation_rowid = @row`);
    const seed = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const id = createHash('sha256').update(`seed-${i}`).digest('hex');
        const hash = id;
        const at = now + i;
        const row = Number(insertOperation.run({ id, request: `seed-${i}`, hash, tool, capability: capabilityId, now: at }).lastInsertRowid);
        insertHold.run({ row, id, capability: capabilityId, now: at });
        move.run('dispatch_committed', at, id);
        move.run('completed', at, id);
        consume.run({ row, now: at, receipt: `r:${id}:2` });
      }
    });
    for (let from = 0; from < operations; from += 10_000) seed.immediate(from, Math.min(operations, from + 10_000));
  } finally {
    db.close();
  }
  seedRequests(dirs.supervisorDir, operations, now);
  return { seconds: (performance.now() - started) / 1000 };
}

/** A settled request per seeded operation, each a copy of the newest real settled one under the seeded names. */
function seedRequests(supervisorDir: string, operations: number, now: number): void {
  const db = new Database(path.join(supervisorDir, 'supervisor.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    const copy = db.prepare(`
      INSERT INTO requests (request_id, operation_id, kind, tool, subject, arguments, cost_units, binding_hash, phase, nonce_id, expected, executor,
                            authorization, report, receipt, output, outcome, reason, attempts, created_at, updated_at)
      SELECT @request, @id, kind, tool, subject, arguments, cost_units, binding_hash, phase, nonce_id, expected, executor,
             authorization, report, receipt, output, outcome, reason, attempts, @now, @now
      FROM requests WHERE rowid = (SELECT max(rowid) FROM requests WHERE phase = 'settled')`);
    const seed = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const id = createHash('sha256').update(`seed-${i}`).digest('hex');
        if (copy.run({ request: `seed-${i}`, id, now: now + i }).changes !== 1) throw new Error('seeding the request log needs a settled request to copy');
      }
    });
    for (let from = 0; from < operations; from += 10_000) seed.immediate(from, Math.min(operations, from + 10_000));
  } finally {
    db.close();
  }
}
