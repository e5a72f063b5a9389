import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { KernelProcess, KernelRoot, ALL_GRANTS } from './helpers.js';

const modeOf = (file: string) => fs.statSync(file).mode & 0o777;

describe('kernel-proc: provisioning and serving', function () {
  this.timeout(20_000);
  const roots: KernelRoot[] = [];
  const fresh = () => {
    const root = new KernelRoot();
    roots.push(root);
    return root;
  };
  after(() => roots.forEach((root) => root.remove()));

  describe('a provisioned kernel', () => {
    const root = fresh();
    let kernel: KernelProcess;
    before(async () => {
      kernel = await KernelProcess.start(root, { mode: 'provision' });
    });
    after(() => kernel.stop());

    it('creates its directory 0700, kernel.key 0600, kernel.pub and kernel.db 0600 inside the process', () => {
      expect(modeOf(root.dir)).to.equal(0o700);
      expect(modeOf(path.join(root.dir, 'kernel.key'))).to.equal(0o600);
      expect(modeOf(path.join(root.dir, 'kernel.db'))).to.equal(0o600);
      expect(root.publicKey).to.match(/^[0-9a-f]{64}$/);
    });

    it('proves identity kernel, key epoch 1, with the key in kernel.pub', () => {
      expect(kernel.session.hello).to.include({ role: 'kernel', id: 'kernel', key_epoch: 1, public_key: root.publicKey });
    });

    it('records that key in kernel.db', () => {
      expect(root.read('SELECT public_key, key_epoch FROM kernel_identity')).to.deep.equal([{ public_key: root.publicKey, key_epoch: 1 }]);
    });

    it('creates the default grant: review-notes/append, any subject, 4 invocations, 1 hour, no cost cap, signed by the kernel', async () => {
      const { grants } = await kernel.request('grant.list', ALL_GRANTS);
      expect(grants).to.have.length(1);
      const capability = decodeArtifact('capability', grants[0]!.capability, { trustedSigners: [root.publicKey] }).body;
      expect(capability).to.include({ tool: 'review-notes/append', subject: '*', max_invocations: 4, max_cost_units: null });
      expect(capability.expires_at - capability.not_before).to.equal(3_600_000);
      expect(grants[0]).to.include({ capability_id: capability.id, revoked_at: null, invocations_used: 0, invocations_held: 0 });
    });

    it('refuses a second process on the same directory while it runs: store_locked', async () => {
      const refusal = await KernelProcess.refusal(root);
      expect(refusal.code).to.equal('store_locked');
      expect(refusal.message).to.include(String(kernel.session.pid));
    });
  });

  it('refuses to provision over an existing kernel: store_exists, and leaves it as it was', async () => {
    const root = fresh();
    await (await KernelProcess.start(root, { mode: 'provision' })).stop();
    const before = root.publicKey;
    const refusal = await KernelProcess.refusal(root, { mode: 'provision' });
    expect(refusal.code).to.equal('store_exists');
    expect(root.publicKey).to.equal(before);
  });

  it('refuses to serve a directory that was never provisioned: store_missing', async () => {
    expect((await KernelProcess.refusal(fresh())).code).to.equal('store_missing');
  });

  it('refuses to serve with a key the store was not provisioned for: identity_mismatch', async () => {
    const [a, b] = [fresh(), fresh()];
    await (await KernelProcess.start(a, { mode: 'provision' })).stop();
    await (await KernelProcess.start(b, { mode: 'provision' })).stop();
    for (const file of ['kernel.key', 'kernel.pub']) fs.copyFileSync(path.join(b.dir, file), path.join(a.dir, file));
    const refusal = await KernelProcess.refusal(a);
    expect(refusal.code).to.equal('identity_mismatch');
    expect(refusal.message).to.match(/kernel\.key holds key .* but kernel\.db records .* for key epoch 1/);
  });

  it('refuses to serve when kernel.pub is not the kernel key: identity_mismatch', async () => {
    const [a, b] = [fresh(), fresh()];
    await (await KernelProcess.start(a, { mode: 'provision' })).stop();
    await (await KernelProcess.start(b, { mode: 'provision' })).stop();
    fs.copyFileSync(path.join(b.dir, 'kernel.pub'), path.join(a.dir, 'kernel.pub'));
    expect((await KernelProcess.refusal(a)).code).to.equal('identity_mismatch');
  });

  it('serves again on the same directory, with the same key and grants', async () => {
    const root = fresh();
    const first = await KernelProcess.start(root, { mode: 'provision' });
    const { grants } = await first.request('grant.list', ALL_GRANTS);
    await first.stop();
    const second = await KernelProcess.start(root);
    expect(second.session.hello.public_key).to.equal(root.publicKey);
    expect((await second.request('grant.list', ALL_GRANTS)).grants).to.deep.equal(grants);
    await second.stop();
  });

  it('provisions with a custom default grant, or with none', async () => {
    const custom = fresh();
    const kernel = await KernelProcess.start(custom, {
      mode: 'provision',
      settings: { default_grant: { tool: 'x/*', subject: 'alice', max_invocations: 2, max_cost_units: 9, ttl_ms: 60_000 } },
    });
    const [grant] = (await kernel.request('grant.list', ALL_GRANTS)).grants;
    expect(decodeArtifact('capability', grant!.capability, { trustedSigners: [custom.publicKey] }).body).to.include({ tool: 'x/*', subject: 'alice', max_cost_units: 9 });
    await kernel.stop();
    const none = await KernelProcess.start(fresh(), { mode: 'provision', settings: { default_grant: null } });
    expect((await none.request('grant.list', ALL_GRANTS)).grants).to.deep.equal([]);
    await none.stop();
  });

  it('refuses settings outside their schema before touching the directory: config_invalid', async () => {
    const root = fresh();
    const refusal = await KernelProcess.refusal(root, { mode: 'provision', settings: { nonce_capacity: 0 } });
    expect(refusal.code).to.equal('config_invalid');
    expect(fs.existsSync(root.dir)).to.equal(false);
  });
});
