// The child's identity proof (ARCHITECTURE.md §4.2): an Ed25519 signature by its own
// long-term key over the canonical JSON of the session id, the supervisor's
// challenge, its role, id, key epoch and store head (docs/ROLLBACK.md). The `custody` tag separates this
// signature from every artifact signature, so neither can stand for the other.
import { canonicalBytes } from '../canonical/jcs.js';
import { type Signer, publicKeyFromHex, signatureFromHex, verifyStrict } from '../crypto/ed25519.js';
import { CustodyError, toCustodyError } from '../errors.js';
import type { ChildRole } from '../protocol/common.js';
import type { HelloBody } from '../protocol/messages.js';

export const HELLO_TAG = 'custody.hello.v1';

export interface HelloClaim {
  readonly role: ChildRole;
  readonly id: string;
  readonly keyEpoch: number;
  /** The head of the child's store (docs/ROLLBACK.md); 0 for a child without one. */
  readonly head?: number;
}

export interface HelloChallenge {
  readonly sid: string;
  readonly challenge: string;
  readonly role: ChildRole;
}

/** The exact bytes a hello signature covers. */
export function helloMessage(sid: string, challenge: string, claim: HelloClaim): Buffer {
  return canonicalBytes({ custody: HELLO_TAG, sid, challenge, role: claim.role, id: claim.id, key_epoch: claim.keyEpoch, head: claim.head ?? 0 });
}

export function signHello(signer: Signer, sid: string, challenge: string, claim: HelloClaim): HelloBody {
  return {
    role: claim.role,
    id: claim.id,
    public_key: signer.publicKeyHex,
    key_epoch: claim.keyEpoch,
    head: claim.head ?? 0,
    signature: signer.signHex(helloMessage(sid, challenge, claim)),
  };
}

export interface PinnedIdentity {
  readonly id: string;
  readonly publicKey: string;
  readonly keyEpoch: number;
  /**
   * A hello by the same id at a higher key epoch passes here: the caller
   * must then move the pin through the child's rotation statements (which
   * must end at the hello's key) before it trusts the session
   * (docs/PROTOCOL.md §12).
   */
  readonly acceptNewerEpoch?: boolean;
}

/**
 * Check a hello against the session it answers and, when the child is
 * already pinned, against the pin. A bad proof is `hello_invalid`; a good
 * proof by the wrong identity is `identity_mismatch`.
 */
export function verifyHello(hello: HelloBody, expected: HelloChallenge, pin: PinnedIdentity | null): void {
  if (hello.role !== expected.role) {
    throw new CustodyError('hello_invalid', `hello claims role ${hello.role}, the session was opened for ${expected.role}`);
  }
  let valid: boolean;
  try {
    const key = publicKeyFromHex(hello.public_key);
    const message = helloMessage(expected.sid, expected.challenge, { role: hello.role, id: hello.id, keyEpoch: hello.key_epoch, head: hello.head });
    valid = verifyStrict(key, message, signatureFromHex(hello.signature));
  } catch (error) {
    throw new CustodyError('hello_invalid', `hello key or signature is malformed: ${toCustodyError(error).message}`, { cause: error });
  }
  if (!valid) throw new CustodyError('hello_invalid', `hello signature by ${hello.id} does not verify for this session`);
  const rotated = pin?.acceptNewerEpoch === true && pin.id === hello.id && hello.key_epoch > pin.keyEpoch;
  if (pin && !rotated && (pin.id !== hello.id || pin.publicKey !== hello.public_key || pin.keyEpoch !== hello.key_epoch)) {
    throw new CustodyError(
      'identity_mismatch',
      `${hello.role} proved identity ${hello.id} key ${hello.public_key.slice(0, 16)}… epoch ${hello.key_epoch}; ` +
        `pinned is ${pin.id} key ${pin.publicKey.slice(0, 16)}… epoch ${pin.keyEpoch}`,
    );
  }
}
