// Step 1 of execute_once and of reconcile_operation (ARCHITECTURE.md §6.2): the
// authorization verifies against the pinned kernel key, is addressed to this
// executor's id, key and epoch, and binds exactly the invocation the
// supervisor recorded from the original request, so an authorization can
// never choose its own expectation. No time check here: the window is
// checked inside the claim transaction (H2, ARCHITECTURE.md §6.5).
import { type SignedArtifact, decodeArtifact } from '../shared/artifacts/artifact.js';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import type { Invocation } from '../shared/protocol/artifacts.js';
import { parametersDigest } from '../shared/protocol/binding.js';
import type { JsonObject } from '../shared/protocol/common.js';
import type { ClaimSubject, Ledger } from './ledger/ledger.js';
import type { LedgerConfig } from './ledger/stores.js';

export interface VerifiedAuthorization {
  readonly artifact: SignedArtifact<'authorization'>;
  readonly invocation: Invocation;
  readonly subject: ClaimSubject;
}

const INVOCATION_FIELDS = [
  'operation_id',
  'request_id',
  'request_binding_hash',
  'capability_id',
  'capability_digest',
  'tool',
  'parameters_digest',
] as const satisfies ReadonlyArray<keyof Invocation>;

/** The keys an authorization is checked against: every kernel key pinned, and this executor's key of each epoch. */
interface PinnedKeys {
  readonly kernel: ReadonlySet<string>;
  readonly executor: ReadonlyMap<number, string>;
}

/**
 * The pinned keys of each identity the ledger has been in. Its `config` is a
 * new object after every recordEpoch (the only way an epoch is added while
 * the process runs), so keying on it drops the keys with the rotation that
 * changes them; without it, two queries ran for every execute
 * (docs/PERFORMANCE.md "Hot-path CPU"). test/executor-proc/rotation.test.ts
 * executes before and after both rotations in one process.
 */
const pinnedByConfig = new WeakMap<LedgerConfig, PinnedKeys>();

function pinnedKeys(ledger: Ledger): PinnedKeys {
  const config = ledger.config;
  let keys = pinnedByConfig.get(config);
  if (keys === undefined) {
    keys = {
      kernel: new Set(ledger.epochs.all('kernel_epochs').map((row) => row.public_key)),
      executor: new Map(ledger.epochs.all('key_epochs').map((row) => [row.epoch, row.public_key])),
    };
    pinnedByConfig.set(config, keys);
  }
  return keys;
}

export function verifyAuthorization(text: string, expected: Invocation, ledger: Ledger): VerifiedAuthorization {
  const config = ledger.config;
  const pinned = pinnedKeys(ledger);
  let artifact: SignedArtifact<'authorization'>;
  try {
    // Any kernel key this executor has pinned: one signed before a kernel rotation is still the kernel's (and retired, below).
    artifact = decodeArtifact('authorization', text, { trustedSigners: pinned.kernel });
  } catch (error) {
    const cause = toCustodyError(error);
    // A key this executor has not pinned: the kernel's newest after a rotation whose statement has not reached it yet (or a forgery).
    // Told apart so that the supervisor carries the kernel's statements and asks again: nothing was claimed (docs/PROTOCOL.md §12).
    if (cause.code === 'signer_untrusted') {
      throw new CustodyError('kernel_key_unpinned', `authorization refused: ${cause.message}; nothing was claimed. If the kernel rotated its key, its rotation statements (kernel.rotated) must reach this executor first`, { cause });
    }
    throw new CustodyError('authorization_invalid', `authorization refused (${cause.code}): ${cause.message}`, { cause });
  }
  const { executor, invocation } = artifact.body;
  // Addressed to this executor at one of its epochs, with that epoch's key: an older one is retired, not someone else's.
  const addressedKey = pinned.executor.get(executor.key_epoch);
  const misaddressed: string[] = [];
  if (executor.id !== config.executorId) misaddressed.push(`id ${executor.id} (this is ${config.executorId})`);
  if (addressedKey === undefined) misaddressed.push(`key epoch ${executor.key_epoch} (this executor is at epoch ${config.keyEpoch})`);
  else if (executor.public_key !== addressedKey) {
    misaddressed.push(`key ${executor.public_key.slice(0, 16)}… (epoch ${executor.key_epoch} of this executor is ${addressedKey.slice(0, 16)}…)`);
  }
  if (misaddressed.length > 0) {
    throw new CustodyError('not_addressed_to_me', `authorization for operation ${invocation.operation_id} is addressed to executor ${misaddressed.join(', ')}`);
  }
  const differing = INVOCATION_FIELDS.filter((field) => invocation[field] !== expected[field]);
  if (differing.length > 0) {
    const shown = differing.map((field) => `${field} ${JSON.stringify(invocation[field])} (expected ${JSON.stringify(expected[field])})`);
    throw new CustodyError('invocation_mismatch', `authorization binds a different invocation than the one recorded: ${shown.join('; ')}`);
  }
  return {
    artifact,
    invocation,
    subject: {
      operationId: invocation.operation_id,
      tool: invocation.tool,
      authorizationDigest: artifact.digest,
      authorizationText: artifact.text,
      notBefore: artifact.body.not_before,
      expiresAt: artifact.body.expires_at,
      signedUnder: { executorEpoch: executor.key_epoch, kernelKey: artifact.envelope.signer },
    },
  };
}

/** The arguments must be the ones the kernel authorized: they hash to its parameters digest. */
export function checkArguments(invocation: Invocation, args: JsonObject): void {
  let digest: string;
  try {
    digest = parametersDigest(args);
  } catch (error) {
    throw new CustodyError('arguments_invalid', `arguments cannot be canonicalized: ${toCustodyError(error).message}`, { cause: error });
  }
  if (digest !== invocation.parameters_digest) {
    throw new CustodyError(
      'arguments_changed',
      `arguments hash to ${digest.slice(0, 16)}…, the authorization of operation ${invocation.operation_id} binds ${invocation.parameters_digest.slice(0, 16)}…`,
    );
  }
}
