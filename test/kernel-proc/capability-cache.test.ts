// Reserve checks the grant's signed capability on every call; the verified
// body is cached by capability id and exact text (kernel-proc/grants.ts). A
// row tampered with after the grant was verified and cached must still be
// refused: changed bytes miss the cache and fail verification, a changed
// column fails the row-against-body comparison made on every reserve.
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { KernelProcess, KernelRoot, TOOL, grantBody, pinBody, reserveBody, testExecutor } from './helpers.js';

describe('kernel-proc: verified capabilities are cached, never trusted over the row', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  let kernel: KernelProcess;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(testExecutor(81)));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  /** Edit kernel.db as an attacker with the file would, past the guard that keeps grants fixed. */
  const tamper = (sql: string) => {
    const db = new Database(path.join(root.dir, 'kernel.db'));
    try {
      db.exec(`DROP TRIGGER IF EXISTS grants_fixed; ${sql}`);
    } finally {
      db.close();
    }
  };
  const cases: Array<[what: string, edit: (id: string) => string]> = [
    ['its signed bytes were changed', (id) => `UPDATE grants SET capability = replace(capability, '"max_invocations":100', '"max_invocations":900') WHERE capability_id = '${id}'`],
    ['a column differs from its signed body', (id) => `UPDATE grants SET max_invocations = 900 WHERE capability_id = '${id}'`],
  ];
  for (const [index, [what, edit]] of cases.entries()) {
    it(`refuses a cached grant once ${what}: capability_invalid`, async () => {
      const grant = await kernel.request('grant.add', grantBody(TOOL));
      const first = await kernel.request('reserve', reserveBody(`cache-ok-${index}`, { capability_id: grant.capability_id }));
      expect(first.verdict).to.equal('allow');
      tamper(edit(grant.capability_id));
      const second = await kernel.request('reserve', reserveBody(`cache-bad-${index}`, { capability_id: grant.capability_id }));
      expect(second).to.include({ verdict: 'deny', reason: 'capability_invalid' });
    });
  }
});
