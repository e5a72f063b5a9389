// ledger.db and archive.db against a long history (docs/PERFORMANCE.md
// "History on the start path"): every statement the ledger, its record
// reader and the archiver prepare finds claims, refusals and reports by a
// key or an index, never by reading the table, so an execute, a replay, a
// start and an archival pass cost what they touch, not the live ledger's
// size or the archive's.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { Archiver } from '../../executor-proc/ledger/archive.js';
import { Ledger } from '../../executor-proc/ledger/ledger.js';
import { provisionStores, type ExecutorStores } from '../../executor-proc/ledger/stores.js';
import { KERNEL } from './helpers.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import { preparedWhile, queryPlan, rowByRow } from '../helpers/query-plans.js';

const EXECUTOR = Signer.fromSeed(Buffer.alloc(32, 5));

/** Statements that read a whole table on purpose, and why. */
const WHOLE_TABLE: ReadonlyArray<readonly [RegExp, string]> = [
  [/FROM (key_epochs|kernel_epochs)\b/, 'the key epochs, a handful of rows'],
  [/FROM sqlite_master/, 'the schema, compared once at open'],
];

describe('executor-proc: ledger.db and archive.db indexes against the statements the ledger prepares', () => {
  it('finds every claim, refusal and report by a key or an index, in the live ledger and the archive', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-ledger-plans-'));
    let stores: ExecutorStores | undefined;
    try {
      const prepared = preparedWhile(() => {
        stores = provisionStores({
          dir: path.join(root, 'alpha'),
          now: Date.now(),
          config: { executorId: 'plans', publicKey: EXECUTOR.publicKeyHex, keyEpoch: 1, kernelPublicKey: KERNEL.publicKeyHex, claimCapacity: 100, refusalReserve: 10 },
        });
        const ledger = new Ledger(stores, { assertHeld: () => undefined });
        new Archiver(ledger, stores.archive);
      });
      const statements = prepared.filter((sql) => /^\s*(SELECT|UPDATE|DELETE|INSERT|WITH)/i.test(sql) && !WHOLE_TABLE.some(([pattern]) => pattern.test(sql)));
      expect(statements.length).to.be.greaterThan(10);
      // A statement is planned on the store whose schema it fits: both have a config table, only the archive archived_* ones.
      const planned = (sql: string): string[] => {
        try {
          return queryPlan(stores!.ledger, sql);
        } catch {
          return queryPlan(stores!.archive, sql);
        }
      };
      const scans = statements.flatMap((sql) =>
        rowByRow(planned(sql)).map((detail) => `${detail}: ${sql.trim()}`),
      );
      expect(scans).to.deep.equal([]);
    } finally {
      stores?.ledger.close();
      stores?.archive.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
