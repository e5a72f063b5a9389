// Key rotation statements (docs/PROTOCOL.md §12): the only way a pinned key
// moves. A statement is a signed artifact of kind `rotation`, signed by the
// key it retires; whoever pins that key at that epoch may pin the new key at
// the next epoch, and nothing else lets a pin move. Every verifier (the
// kernel for executors, every executor for the kernel, the supervisor for
// both) runs these same functions.
import { type Signer, publicKeyFromHex } from '../crypto/ed25519.js';
import { CustodyError, toCustodyError } from '../errors.js';
import type { RotationBody } from '../protocol/artifacts.js';
import { type SignedArtifact, decodeArtifact, readEnvelope, signArtifact } from './artifact.js';

/** A pinned key: who, at which epoch, with which public key. */
export interface EpochKey {
  readonly role: 'kernel' | 'executor';
  readonly id: string;
  readonly epoch: number;
  readonly publicKey: string;
}

/** Sign the statement that retires `old` (the signer) in favour of `newPublicKey` at the next epoch. */
export function signRotation(old: Signer, from: Omit<EpochKey, 'publicKey'>, newPublicKey: string, issuedAt: number): SignedArtifact<'rotation'> {
  publicKeyFromHex(newPublicKey);
  return signArtifact(
    'rotation',
    {
      role: from.role,
      id: from.id,
      old_epoch: from.epoch,
      new_epoch: from.epoch + 1,
      old_public_key: old.publicKeyHex,
      new_public_key: newPublicKey,
      issued_at: issuedAt,
    },
    old,
  );
}

/**
 * The key a statement moves `pinned` to. Refused (rotation_invalid) unless
 * it verifies under the pinned key, names the same role and id, starts at
 * the pinned epoch and moves it forward by exactly one, to a valid key that
 * is not the old one.
 */
export function verifyRotation(pinned: EpochKey, text: string): { next: EpochKey; statement: SignedArtifact<'rotation'> } {
  let statement: SignedArtifact<'rotation'>;
  try {
    statement = decodeArtifact('rotation', text, { trustedSigners: [pinned.publicKey] });
  } catch (error) {
    const cause = toCustodyError(error);
    throw new CustodyError(
      'rotation_invalid',
      `rotation statement for ${pinned.role} ${pinned.id} does not verify under its pinned key ${pinned.publicKey.slice(0, 16)}… (epoch ${pinned.epoch}): ${cause.code}: ${cause.message}`,
      { cause },
    );
  }
  const body = statement.body;
  const faults: string[] = [];
  if (body.role !== pinned.role || body.id !== pinned.id) faults.push(`it names ${body.role} ${body.id}`);
  if (body.old_public_key !== pinned.publicKey) faults.push(`its old key is ${body.old_public_key.slice(0, 16)}…`);
  if (body.old_epoch !== pinned.epoch) faults.push(`its old epoch is ${body.old_epoch}, the pinned epoch ${pinned.epoch}`);
  if (body.new_epoch !== body.old_epoch + 1) faults.push(`it moves epoch ${body.old_epoch} to ${body.new_epoch}, not to ${body.old_epoch + 1}`);
  if (body.new_public_key === body.old_public_key) faults.push('its new key is the old key');
  try {
    publicKeyFromHex(body.new_public_key);
  } catch (error) {
    faults.push(`its new key is not usable: ${toCustodyError(error).message}`);
  }
  if (faults.length > 0) {
    throw new CustodyError('rotation_invalid', `rotation statement for ${pinned.role} ${pinned.id} at epoch ${pinned.epoch} is refused: ${faults.join('; ')}; the pin stays`);
  }
  return { next: { role: pinned.role, id: pinned.id, epoch: body.new_epoch, publicKey: body.new_public_key }, statement };
}

/**
 * Walk a chain of statements from `pinned`, in order. Statements at or below
 * the pinned epoch are skipped (a chain delivered again is not an error);
 * every other one must follow the last by exactly one epoch. Returns the
 * statements that moved the pin, in order, and where it ends.
 */
export function verifyChain(pinned: EpochKey, texts: readonly string[]): { end: EpochKey; applied: Array<SignedArtifact<'rotation'>> } {
  let end = pinned;
  const applied: Array<SignedArtifact<'rotation'>> = [];
  for (const text of texts) {
    if (statementEpochs(text).new_epoch <= end.epoch) continue;
    const step = verifyRotation(end, text);
    applied.push(step.statement);
    end = step.next;
  }
  return { end, applied };
}

/** The epochs a statement names, read without trusting it (to skip one already applied). */
export function statementEpochs(text: string): Pick<RotationBody, 'old_epoch' | 'new_epoch'> {
  try {
    const body = readEnvelope(text).envelope.body as Partial<RotationBody>;
    if (typeof body.old_epoch === 'number' && typeof body.new_epoch === 'number') return { old_epoch: body.old_epoch, new_epoch: body.new_epoch };
  } catch (error) {
    throw new CustodyError('rotation_invalid', `a rotation statement is not a signed artifact: ${toCustodyError(error).message}`, { cause: error });
  }
  throw new CustodyError('rotation_invalid', 'a rotation statement names no epochs');
}
