// The invariant checker can fail: a clean state passes, and each corruption
// of the stores or the journal that breaks the guarantee is reported under
// its rule. The corruptions bypass the stores' own guards (their triggers are
// dropped on a copy), as a bug or an operator with the sqlite3 shell might.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { appendFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { checkInvariants } from '../../../scripts/chaos/invariants.js';
import { operationIdFor } from '../../../shared/protocol/binding.js';
import { type TestService, startService } from '../../helpers/service.js';

function withoutGuards(file: string, sql: string): void {
  const db = new Database(file);
  try {
    for (const { name } of db.prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger'").all() as Array<{ name: string }>) db.exec(`DROP TRIGGER "${name}"`);
    db.exec(sql);
  } finally {
    db.close();
  }
}

const A = operationIdFor('inv-a');
const B = operationIdFor('inv-b');

interface Case {
  readonly name: string;
  corrupt(root: string): void;
  readonly rules: readonly string[];
  readonly mustBeFinal?: readonly string[];
}

const journalOf = (root: string) => path.join(root, 'resources', 'review-notes.jsonl');
const kernelDb = (root: string) => path.join(root, 'kernel', 'kernel.db');
const ledgerDb = (root: string) => path.join(root, 'executors', 'default', 'ledger.db');

const CASES: readonly Case[] = [
  {
    name: 'a second journal line of a completed operation',
    corrupt: (root) => {
      const line = readFileSync(journalOf(root), 'utf8').split('\n').find((l) => l.includes(A))!;
      appendFileSync(journalOf(root), line + '\n');
    },
    rules: ['at_most_one_effect', 'completed_one_effect', 'ledger_matches_journal'],
  },
  {
    name: 'a completed operation whose journal line is missing',
    corrupt: (root) => writeFileSync(journalOf(root), readFileSync(journalOf(root), 'utf8').split('\n').filter((l) => !l.includes(A)).join('\n')),
    rules: ['completed_one_effect', 'ledger_matches_journal'],
  },
  {
    name: 'an effect nobody authorized',
    corrupt: (root) => appendFileSync(journalOf(root), JSON.stringify({ operation_id: 'f'.repeat(64), note: 'x', sha256: '0'.repeat(64) }) + '\n'),
    rules: ['effect_authorized'],
  },
  {
    name: 'a completed operation settled on a report whose signature does not verify',
    // One hex digit of the signature flipped: same length, same shape, does not verify.
    corrupt: (root) =>
      withoutGuards(
        kernelDb(root),
        `UPDATE reports SET report = substr(report, 1, instr(report, '"signature":"') + 12)
           || CASE substr(report, instr(report, '"signature":"') + 13, 1) WHEN '0' THEN '1' ELSE '0' END
           || substr(report, instr(report, '"signature":"') + 14) WHERE operation_id = '${A}'`,
      ),
    rules: ['completed_signed_report', 'one_report'],
  },
  {
    name: 'a settled operation whose hold is still reserved',
    corrupt: (root) => withoutGuards(kernelDb(root), `UPDATE holds SET state = 'reserved' WHERE operation_id = '${B}'`),
    rules: ['no_reserved_hold_when_settled', 'grant_usage_is_holds'],
  },
  {
    name: 'a released operation with an effect',
    corrupt: (root) => withoutGuards(kernelDb(root), `UPDATE operations SET state = 'released' WHERE operation_id = '${B}'; UPDATE holds SET state = 'released' WHERE operation_id = '${B}'`),
    rules: ['no_effect_when_released', 'released_signed_report', 'ledger_matches_kernel', 'log_matches_kernel'],
  },
  {
    name: 'an unknown operation without a reason',
    corrupt: (root) => withoutGuards(kernelDb(root), `UPDATE operations SET state = 'unknown', flag = NULL WHERE operation_id = '${B}'; UPDATE holds SET state = 'reserved' WHERE operation_id = '${B}'`),
    rules: ['unknown_has_reason', 'log_matches_kernel'],
  },
  {
    name: 'a claim without a report under an operation the kernel says completed',
    corrupt: (root) => withoutGuards(ledgerDb(root), `DELETE FROM reports WHERE operation_id = '${A}'`),
    rules: ['ledger_matches_kernel'],
  },
  {
    name: 'a completed operation whose completion receipt is gone',
    corrupt: (root) => withoutGuards(kernelDb(root), `DELETE FROM receipts WHERE operation_id = '${A}' AND decision = 'completion'`),
    // The supervisor's log keeps the receipt the kernel lost.
    rules: ['completed_signed_receipt', 'log_matches_kernel'],
  },
  {
    name: 'an allowed operation without a hold',
    corrupt: (root) => withoutGuards(kernelDb(root), `DELETE FROM holds WHERE operation_id = '${B}'`),
    rules: ['hold_exists'],
  },
  {
    name: 'a completed operation whose hold was released, not consumed',
    corrupt: (root) => withoutGuards(kernelDb(root), `UPDATE holds SET state = 'released' WHERE operation_id = '${B}'`),
    // And the grant counts fewer invocations used than operations completed.
    rules: ['hold_matches_state', 'grant_usage_is_holds'],
  },
  {
    name: 'a grant that allowed more invocations than its bound',
    corrupt: (root) => withoutGuards(kernelDb(root), 'UPDATE grants SET max_invocations = 1'),
    rules: ['grant_within_bound'],
  },
  {
    name: 'a request that never reached a final answer',
    corrupt: () => undefined,
    mustBeFinal: ['inv-a', 'inv-never'],
    rules: ['request_final'],
  },
];

describe('the invariant checker', function () {
  this.timeout(60_000);
  let service: TestService;
  let root: string;
  const copies: string[] = [];

  before(async () => {
    service = await startService();
    for (const id of ['inv-a', 'inv-b']) {
      const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: id, arguments: { note: `note ${id}` } }, 'agent');
      expect(answer.body).to.include({ outcome: 'completed' });
    }
    await service.stop();
    root = service.dir;
  });

  after(() => {
    service.cleanup();
    for (const copy of copies) rmSync(copy, { recursive: true, force: true });
  });

  it('passes the state a real service left, every request final', () => {
    const result = checkInvariants({ root, mustBeFinal: ['inv-a', 'inv-b'] });
    expect(result.violations).to.deep.equal([]);
    expect(result).to.include({ operations: 2, effects: 2, final: 2 });
  });

  for (const c of CASES) {
    it(`reports ${c.name}: ${c.rules.join(', ')}`, () => {
      const copy = path.join(mkdtempSync(path.join(tmpdir(), 'custody-inv-')), 'state');
      copies.push(path.dirname(copy));
      cpSync(root, copy, { recursive: true });
      c.corrupt(copy);
      const rules = new Set(checkInvariants({ root: copy, mustBeFinal: c.mustBeFinal ?? [] }).violations.map((v) => v.rule));
      expect([...rules].sort()).to.deep.equal([...c.rules].sort());
    });
  }
});
