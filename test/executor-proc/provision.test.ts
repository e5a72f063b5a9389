// Provision vs open (ARCHITECTURE.md §6.2): provisioning creates the key in the
// process and the ledger once; opening refuses anything missing, changed,
// loose, copied or swapped, and never creates a replacement.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import type { CustodyError } from '../../shared/errors.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import { createKeyPair } from '../../shared/crypto/key-files.js';
import { OTHER_KERNEL, type Home, KERNEL, makeHome, provisioned, removeHome, sqlite, startExecutor, stopExecutor } from './helpers.js';

async function refusedStart(home: Home, options: Parameters<typeof startExecutor>[1]): Promise<CustodyError> {
  try {
    const executor = await startExecutor(home, options);
    await stopExecutor(executor);
  } catch (error) {
    return error as CustodyError;
  }
  throw new Error('expected the executor to refuse to start');
}

const mode = (file: string) => fs.statSync(file).mode & 0o777;

describe('executor-proc provision and open', function () {
  this.timeout(30_000);
  let home: Home;
  let identity: Awaited<ReturnType<typeof provisioned>>;

  before(async () => {
    home = makeHome('alpha');
    identity = await provisioned(home, { settings: { claim_capacity: 500, refusal_reserve: 50 } });
  });

  after(() => removeHome(home));

  it('creates the key in the process, a private ledger and its immutable config row', () => {
    expect(identity).to.deep.include({ id: 'alpha', key_epoch: 1 });
    expect(mode(home.dir)).to.equal(0o700);
    expect(mode(path.join(home.dir, 'executor.key'))).to.equal(0o600);
    expect(fs.readFileSync(path.join(home.dir, 'executor.pub'), 'utf8')).to.equal(`${identity.public_key}\n`);
    expect(mode(home.ledgerFile)).to.equal(0o600);
    const [config] = sqlite(home.ledgerFile, 'SELECT executor_id, public_key, key_epoch, kernel_public_key, claim_capacity, refusal_reserve FROM config').rows;
    expect(config).to.deep.equal({
      executor_id: 'alpha',
      public_key: identity.public_key,
      key_epoch: 1,
      kernel_public_key: KERNEL.publicKeyHex,
      claim_capacity: 500,
      refusal_reserve: 50,
    });
  });

  it('serves the provisioned identity again, with matching settings or none', async () => {
    const variants: JsonObject[] = [{}, { executor_id: 'alpha', key_epoch: 1, claim_capacity: 500 }];
    for (const settings of variants) {
      const executor = await startExecutor(home, { settings });
      expect(executor.identity).to.deep.equal(identity);
      expect((await stopExecutor(executor)).code).to.equal(0);
    }
  });

  it('refuses to provision over an existing ledger and leaves it as it was', async () => {
    const before = fs.statSync(home.ledgerFile).ino;
    const error = await refusedStart(home, { mode: 'provision' });
    expect(error.code).to.equal('store_exists');
    expect(fs.statSync(home.ledgerFile).ino).to.equal(before);
  });

  it('refuses to serve a missing ledger and creates nothing', async () => {
    const empty = makeHome('ghost');
    try {
      const error = await refusedStart(empty, {});
      expect(error.code).to.equal('ledger_missing');
      expect(fs.existsSync(empty.dir)).to.equal(false);
    } finally {
      removeHome(empty);
    }
  });

  const changed: Array<[string, Parameters<typeof startExecutor>[1], string]> = [
    ['a changed executor id', { settings: { executor_id: 'beta' } }, 'ledger_identity'],
    ['a changed claim capacity', { settings: { claim_capacity: 501 } }, 'ledger_identity'],
    ['another kernel key than the one pinned at provision', { kernelPin: OTHER_KERNEL.publicKeyHex }, 'identity_mismatch'],
    ['settings outside their schema', { settings: { max_in_flight: 0 } }, 'config_invalid'],
  ];
  for (const [what, options, code] of changed) {
    it(`refuses ${what} with ${code}`, async () => {
      expect((await refusedStart(home, options)).code).to.equal(code);
    });
  }

  it('refuses a copied ledger (another inode) with store_identity', async () => {
    const copy = path.join(home.root, 'executors', 'copy');
    execFileSync('cp', ['-a', home.dir, copy]);
    fs.rmSync(path.join(copy, 'store.lock'), { recursive: true, force: true });
    const error = await refusedStart(home, { dir: copy });
    expect(error.code).to.equal('store_identity');
  });

  it('refuses a ledger swapped in place with store_identity, and serves again once the original is back', async () => {
    const aside = path.join(home.root, 'ledger.original');
    fs.renameSync(home.ledgerFile, aside);
    fs.copyFileSync(aside, home.ledgerFile);
    fs.chmodSync(home.ledgerFile, 0o600);
    try {
      expect((await refusedStart(home, {})).code).to.equal('store_identity');
    } finally {
      fs.renameSync(aside, home.ledgerFile);
    }
    const executor = await startExecutor(home);
    expect((await stopExecutor(executor)).code).to.equal(0);
  });

  it('refuses loose permissions on the ledger or its directory', async () => {
    for (const [target, loose, tight] of [
      [home.ledgerFile, 0o644, 0o600],
      [home.dir, 0o755, 0o700],
    ] as const) {
      fs.chmodSync(target, loose);
      try {
        expect((await refusedStart(home, {})).code).to.equal('store_permissions');
      } finally {
        fs.chmodSync(target, tight);
      }
    }
  });

  it('refuses a ledger whose guards were dropped from the sqlite3 shell', async () => {
    const tampered = makeHome('tampered');
    try {
      await provisioned(tampered);
      expect(sqlite(tampered.ledgerFile, 'DROP TRIGGER claims_no_update').error).to.equal(null);
      expect((await refusedStart(tampered, {})).code).to.equal('store_schema');
    } finally {
      removeHome(tampered);
    }
  });

  it('refuses a ledger served with another executor key than the one it records', async () => {
    const keyFile = path.join(home.dir, 'executor.key');
    const original = fs.readFileSync(keyFile);
    const scratch = fs.mkdtempSync(path.join(home.root, 'key-'));
    createKeyPair(scratch, 'executor');
    fs.copyFileSync(path.join(scratch, 'executor.key'), keyFile);
    try {
      expect((await refusedStart(home, {})).code).to.equal('ledger_identity');
    } finally {
      fs.writeFileSync(keyFile, original);
    }
  });

  it('refuses to start with an adapter module that cannot be loaded, or that serves a built-in tool again', async () => {
    const missing = await refusedStart(home, { adapters: [path.join(home.root, 'no-such-adapter.js')] });
    expect(missing.code).to.equal('config_invalid');
    const twice = path.join(home.root, 'twice.mjs');
    fs.writeFileSync(twice, "export default { tool: 'review-notes/append', contract: 'read_only', argumentSchema: { safeParse: () => ({ success: true }) }, execute: async () => ({ outcome: 'applied' }) };\n");
    const duplicate = await refusedStart(home, { adapters: [twice] });
    expect(duplicate.code).to.equal('config_invalid');
    expect(duplicate.message).to.match(/served twice/);
  });

  it('refuses a second process on the same directory with store_locked', async () => {
    const first = await startExecutor(home);
    try {
      expect((await refusedStart(home, {})).code).to.equal('store_locked');
    } finally {
      await stopExecutor(first);
    }
  });
});
