// Two kernel.rotate requests in one write batch (one event-loop turn: a
// retried request, or a host that sends two): the second is refused while the
// first's pending key exists, so the first's promotion never overwrites the
// key kernel.db names. Before, the second replaced the pending key, the first
// promoted it and zeroed kernel.key: the kernel could never start again.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { loadSigner } from '../../shared/crypto/key-files.js';
import { KernelProcess, KernelRoot } from './helpers.js';

describe('kernel-proc: two key rotations in one batch', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  after(() => root.remove());

  it('rotates once and refuses the other with rotation_in_progress; kernel.key holds the key kernel.db names, and the kernel starts again', async () => {
    let kernel = await KernelProcess.start(root, { mode: 'provision' });
    const answers = await Promise.allSettled([kernel.request('kernel.rotate', {}), kernel.request('kernel.rotate', {})]);
    const rotated = answers.filter((a) => a.status === 'fulfilled');
    const refused = answers.filter((a): a is PromiseRejectedResult => a.status === 'rejected');
    expect(rotated, JSON.stringify(answers)).to.have.length(1);
    expect(refused.map((a) => (a.reason as { code: string }).code)).to.deep.equal(['rotation_in_progress']);
    const epochs = root.read<{ epoch: number; public_key: string }>('SELECT epoch, public_key FROM kernel_epochs ORDER BY epoch');
    expect(epochs.map((row) => row.epoch)).to.deep.equal([1, 2]);
    expect(loadSigner(path.join(root.dir, 'kernel.key')).publicKeyHex).to.equal(epochs[1]!.public_key);
    expect(root.publicKey).to.equal(epochs[1]!.public_key);
    await kernel.stop();
    kernel = await KernelProcess.start(root, {});
    expect((await kernel.request('kernel.rotate', {})).key_epoch, 'the next rotation goes on from it').to.equal(3);
    await kernel.stop();
  });

  it('names a kernel.key put back from before a rotation as the stale file: the key of the epoch it retired, and the way back is the newest key', async () => {
    const kernel = await KernelProcess.start(root, {});
    const keyFile = path.join(root.dir, 'kernel.key');
    const before = readFileSync(keyFile);
    const rotated = await kernel.request('kernel.rotate', {});
    await kernel.stop();
    const newest = readFileSync(keyFile);
    writeFileSync(keyFile, before);
    const refusal = await KernelProcess.refusal(root, {});
    expect(refusal.code).to.equal('identity_mismatch');
    expect(refusal.message).to.contain(`the key of epoch ${rotated.key_epoch - 1}, which a rotation retired`).and.to.contain(`Put back the newest kernel.key (epoch ${rotated.key_epoch})`);
    writeFileSync(keyFile, newest);
    await (await KernelProcess.start(root, {})).stop();
  });
});
