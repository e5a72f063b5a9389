// The bench's count of signed bytes kept (scripts/bench/signed-bytes.ts),
// held to a real service: one operation adds, to each store, exactly the
// UTF-8 bytes of the artifacts `custody receipt export` hands out for it, as
// docs/PERFORMANCE.md "Stop 28: the signed bytes each store keeps" says each
// store keeps them. And no column of the stores' schemas that holds a
// signed artifact is left out of the count.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import path from 'node:path';
import { filesUnder } from '../../scripts/bench/procfs.js';
import { SIGNED_COLUMNS, signedBytes } from '../../scripts/bench/signed-bytes.js';
import { ARCHIVE_MIGRATIONS, LEDGER_MIGRATIONS } from '../../executor-proc/ledger/schema.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { type Migration, applyMigrations } from '../../shared/store/migrations.js';
import { SUPERVISOR_MIGRATIONS } from '../../supervisor/store/schema.js';
import { type TestService, startService } from '../helpers/service.js';

const STORES: ReadonlyArray<readonly [string, readonly Migration[]]> = [
  ['supervisor.db', SUPERVISOR_MIGRATIONS],
  ['kernel.db', KERNEL_MIGRATIONS],
  ['ledger.db', LEDGER_MIGRATIONS],
  ['archive.db', ARCHIVE_MIGRATIONS],
];

/** Every column of every table of `db`, as [table, column]. */
function tableColumns(db: Database.Database): Array<readonly [string, string]> {
  const tables = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as Array<{ name: string }>;
  return tables.flatMap(({ name }) => (db.prepare('SELECT name FROM pragma_table_info(?)').all(name) as Array<{ name: string }>).map((column) => [name, column.name] as const));
}

/** Every table column of a store at its latest version whose name says it holds a signed artifact. */
function artifactColumns(migrations: readonly Migration[]): string[] {
  const db = new Database(':memory:');
  try {
    applyMigrations(db, 'signed-bytes', migrations, { provisioning: true });
    return tableColumns(db)
      .filter(([, column]) => /^(authorization|report|receipt|last_receipt|capability|statement)$/.test(column))
      .map(([table, column]) => `${table}.${column}`);
  } finally {
    db.close();
  }
}

/** `<file> <table>.<column>` of every column under `root` that holds a signed envelope (its canonical text starts with the body and names a custody schema). */
function columnsHoldingArtifacts(root: string): string[] {
  return filesUnder(root, (name) => name.endsWith('.db')).flatMap((file) => {
    const db = new Database(path.join(root, file), { readonly: true, fileMustExist: true });
    try {
      return tableColumns(db)
        .filter(([table, column]) => db.prepare(`SELECT 1 FROM "${table}" WHERE typeof("${column}") = 'text' AND "${column}" LIKE '{"body":%"schema":"custody.%' LIMIT 1`).get() !== undefined)
        .map(([table, column]) => `${path.basename(file)} ${table}.${column}`);
    } finally {
      db.close();
    }
  });
}

describe('bench: the signed bytes each store keeps', function () {
  this.timeout(60_000);

  it('counts every column that holds a signed artifact, key rotation statements aside', () => {
    for (const [file, migrations] of STORES) {
      const counted = SIGNED_COLUMNS[file]!.map(([table, column]) => `${table}.${column}`).sort();
      // A rotation statement is a row per key rotation, not a cost per operation.
      const found = artifactColumns(migrations).filter((name) => !/^(rotations|key_epochs|kernel_epochs)\./.test(name)).sort();
      expect(counted, file).to.deep.equal(found);
    }
  });

  describe('on a real service', () => {
    let service: TestService;
    after(() => service?.cleanup());

    it("adds, per store, the UTF-8 bytes of the operation's exported artifacts", async () => {
      service = await startService();
      const before = signedBytes(service.dir);
      // Not ASCII: a count of characters instead of bytes would come out short.
      const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: 'signed-1', arguments: { note: 'café — ✓ reviewed' } }, 'agent');
      expect(answer.body).to.include({ outcome: 'completed' });
      const exported = await service.http('GET', '/v1/operations/signed-1/artifacts', undefined, 'agent');
      const files = exported.body.artifacts as Array<{ kind: string; text: string }>;
      const bytesOf = (kind: string) => files.filter((f) => f.kind === kind).map((f) => Buffer.byteLength(f.text, 'utf8'));
      const [authorization] = bytesOf('authorization');
      const [report] = bytesOf('report');
      const receipts = bytesOf('receipt');
      expect(receipts).to.have.length(2);
      expect(report!).to.be.greaterThan(files.find((f) => f.kind === 'report')!.text.length);
      await service.stop();
      const after = signedBytes(service.dir);
      const added = Object.fromEntries(Object.keys(after).map((file) => [file, after[file]! - (before[file] ?? 0)]));
      // By content, not by name: every column of every table where this operation left a signed artifact is counted.
      expect(columnsHoldingArtifacts(service.dir).sort()).to.deep.equal(
        Object.entries(SIGNED_COLUMNS)
          .filter(([file]) => file !== 'archive.db')
          .flatMap(([file, columns]) => columns.filter(([table]) => table !== 'grants').map(([table, column]) => `${file} ${table}.${column}`))
          .concat('kernel.db grants.capability')
          .sort(),
      );
      expect(added).to.deep.equal({
        'supervisor/supervisor.db': authorization! + report! + receipts[1]!,
        'kernel/kernel.db': authorization! + report! + receipts[0]! + receipts[1]!,
        'executors/default/ledger.db': authorization! + report!,
        'executors/default/archive.db': 0,
      });
    });
  });
});
