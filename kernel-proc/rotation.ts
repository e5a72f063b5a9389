// Key rotation at the kernel (docs/PROTOCOL.md §12, docs/SECURITY.md
// "Rotating keys"):
//   pin.rotate    — an executor's next key epoch is pinned only on a
//                   statement signed by the key pinned now, from the pinned
//                   epoch to the next; the old pin row stays, so reports
//                   signed under it still verify;
//   kernel.rotate — the kernel's next key is made in this process, kept
//                   beside the current one until kernel.db commits the new
//                   epoch with the statement the current key signed, then
//                   promoted over kernel.key (the retired private key is
//                   overwritten); setup.ts finishes a promotion a crash cut.
import { verifyRotation } from '../shared/artifacts/rotation.js';
import { readEnvelope } from '../shared/artifacts/artifact.js';
import { signRotation } from '../shared/artifacts/rotation.js';
import { createPendingKeyPair, discardPendingKey, hasPendingKey, promotePendingKey } from '../shared/crypto/key-files.js';
import type { Signer } from '../shared/crypto/ed25519.js';
import { CustodyError } from '../shared/errors.js';
import { crashPoint } from '../shared/fault.js';
import type { RequestOf, ResultOf } from '../shared/protocol/messages.js';
import { rotationBody } from '../shared/protocol/artifacts.js';
import { ROTATION_STATEMENTS_MAX } from '../shared/protocol/rotation-messages.js';
import type { UnitContext } from './commit-queue.js';
import { KERNEL_ID, type Kernel } from './kernel.js';

export function rotatePin(kernel: Kernel, request: RequestOf<'pin.rotate'>, context: UnitContext): ResultOf<'pin.rotate'> {
  const { now } = context;
  const claimed = rotationBody.safeParse(readEnvelope(request.statement).envelope.body);
  if (!claimed.success || claimed.data.role !== 'executor') {
    throw new CustodyError('rotation_invalid', 'pin.rotate carries no executor rotation statement; the pin stays');
  }
  const { pins } = kernel.store;
  const id = claimed.data.id;
  const current = pins.current(id);
  if (!current) throw new CustodyError('executor_unknown', `executor ${id} is not pinned; a rotation statement cannot introduce it`);
  // Delivered again (a supervisor that crashed before recording the answer): the same key at that epoch is the same pin.
  const already = pins.at(id, claimed.data.new_epoch);
  if (already && already.public_key === claimed.data.new_public_key && claimed.data.new_epoch <= current.key_epoch) {
    verifyRotation({ role: 'executor', id, epoch: claimed.data.old_epoch, publicKey: pins.at(id, claimed.data.old_epoch)?.public_key ?? '' }, request.statement);
    return { executor_id: id, public_key: already.public_key, key_epoch: already.key_epoch, pinned_at: already.pinned_at };
  }
  const { next } = verifyRotation({ role: 'executor', id, epoch: current.key_epoch, publicKey: current.public_key }, request.statement);
  const row = { executor_id: id, key_epoch: next.epoch, public_key: next.publicKey, tools: current.tools, pinned_at: now };
  pins.insert(row);
  context.whenCommitted(() => kernel.log.info('executor_key_rotated', { executor_id: id, key_epoch: next.epoch, retired_epoch: current.key_epoch, public_key: next.publicKey }));
  return { executor_id: id, public_key: row.public_key, key_epoch: row.key_epoch, pinned_at: row.pinned_at };
}

/** What a kernel rotation leaves to do once its batch has committed (or failed). */
export interface KernelRotation {
  readonly result: ResultOf<'kernel.rotate'>;
  readonly previous: Signer;
}

/**
 * The write-unit half: make the pending key pair, sign the statement with the
 * current key, record the new epoch, and sign with the new key from here on
 * (later units of the same batch included). `finishKernelRotation` promotes
 * the key files after the commit, or undoes the swap if it failed.
 */
export function rotateKernel(kernel: Kernel, dir: string, context: UnitContext): KernelRotation {
  // One at a time: a second rotation in the same batch would replace the first's pending key, and the first's
  // promotion would then overwrite the key kernel.db names. The pending pair exists from here until the promotion.
  if (hasPendingKey(dir, 'kernel')) {
    throw new CustodyError('rotation_in_progress', 'a kernel key rotation is under way (kernel.next.key exists until it is promoted); ask again once it is answered');
  }
  const current = kernel.store.currentKernelEpoch();
  if (current.public_key !== kernel.signer.publicKeyHex) {
    throw new CustodyError('internal', `kernel signs with ${kernel.signer.publicKeyHex.slice(0, 16)}…, kernel.db records ${current.public_key.slice(0, 16)}… at epoch ${current.epoch}`);
  }
  const next = createPendingKeyPair(dir, 'kernel');
  const statement = signRotation(kernel.signer, { role: 'kernel', id: KERNEL_ID, epoch: current.epoch }, next.publicKeyHex, context.now);
  kernel.store.recordKernelEpoch({ epoch: current.epoch + 1, public_key: next.publicKeyHex, statement: statement.text, created_at: context.now });
  context.afterCommit('after_kernel_rotation_commit');
  const previous = kernel.signer;
  kernel.signer = next;
  return { previous, result: { key_epoch: current.epoch + 1, public_key: next.publicKeyHex, statement: statement.text } };
}

export function finishKernelRotation(kernel: Kernel, dir: string, committed: boolean, rotation: KernelRotation | null): void {
  if (!committed) {
    if (rotation) kernel.signer = rotation.previous;
    discardPendingKey(dir, 'kernel');
    return;
  }
  promotePendingKey(dir, 'kernel');
  crashPoint('kernel', 'after_kernel_key_promoted');
  kernel.log.info('kernel_key_rotated', { key_epoch: rotation?.result.key_epoch, public_key: rotation?.result.public_key });
}

export function listKeys(kernel: Kernel, request: RequestOf<'keys.list'>): ResultOf<'keys.list'> {
  const epochs = kernel.store.kernelEpochs();
  return {
    kernel_epoch: epochs.at(-1)!.epoch,
    kernel: epochs.filter((row) => row.epoch > request.after_epoch).slice(0, ROTATION_STATEMENTS_MAX).map((row) => ({ key_epoch: row.epoch, public_key: row.public_key, statement: row.statement, created_at: row.created_at })),
    executors: kernel.store.pins.all().map((pin) => ({ executor_id: pin.executor_id, key_epoch: pin.key_epoch, public_key: pin.public_key, pinned_at: pin.pinned_at })),
  };
}
