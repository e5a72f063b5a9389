// Step 1 of execute_once and of reconcile_operation (ARCHITECTURE.md §6.2): the
// authorization verifies against the pinned kernel key, is addressed to this
// executor's id, key and epoch, and binds exactly the invocation the
// supervisor recorded from the original request, so an authorization can
// never choose its own expectation. No time check here: the window is
// checked inside the claim transaction (H2, ARCHITECTURE.md §6.5).
import { type SignedArtifact, decodeArtifact } from '../shared/artifacts/artifact.js';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import { type Invocation } from '../shared/protocol/artifacts.js';
import { parametersDigest } from '../shared/protocol/binding.js';
import { type JsonObject } from '../shared/protocol/common.js';
import { type ClaimSubject, type Ledger } from './ledger/ledger.js';

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

export function verifyAuthorization(text: string, expected: Invocation, ledger: Ledger): VerifiedAuthorization {
  const config = ledger.config;
  const kernelKeys = ledger.epochs.all('kernel_epochs');
  let artifact: SignedArtifact<'authorization'>;
  try {
    // Any kernel key this executor has pinned: one signed before a kernel rotation is still the kernel's (and retired, below).
    artifact = decodeArtifact('authorization', text, { trustedSigners: kernelKeys.map((row) => row.public_key) });
  } catch (error) {
    const cause = toCustodyError(error);
    throw new CustodyError('authorization_invalid', `authorization refused (${cause.code}): ${cause.message}`, { cause });
  }
  const { executor, invocation } = artifact.body;
  // Addressed to this executor at one of its epochs, with that epoch's key: an older one is retired, not someone else's.
  const addressedKey = ledger.epochs.all('key_epochs').find((row) => row.epoch === executor.key_epoch)?.public_key;
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
