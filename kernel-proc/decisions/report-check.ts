// Before a report can settle anything: the authorization must be this
// kernel's, exactly the one committed for its operation; the report must be
// signed by the executor key that authorization was addressed to, or by a
// later key epoch of the same executor that the kernel pinned through a
// rotation statement, and must name that authorization. Anything that
// fails here is refused as input, unsigned and without touching the
// operation: what cannot be attributed is no decision about the operation,
// and a router on the pipe must not be able to fill its history or end it.
import { type SignedArtifact, decodeArtifact, readEnvelope } from '../../shared/artifacts/artifact.js';
import { canonicalDigest } from '../../shared/canonical/digest.js';
import { CustodyError, isErrorCode, toCustodyError } from '../../shared/errors.js';
import { ARTIFACT_MAX_BYTES, type AuthorizationBody, type Envelope, type ReportBody } from '../../shared/protocol/artifacts.js';
import type { Kernel } from '../kernel.js';
import type { OperationRow } from '../store/operations-table.js';

export interface AuthenticAuthorization {
  readonly operation: OperationRow;
  readonly authorization: SignedArtifact<'authorization'>;
}

export function checkAuthorization(kernel: Kernel, text: string): AuthenticAuthorization {
  return retainedAuthorization(kernel, text) ?? verifiedAuthorization(kernel, text);
}

/**
 * The authorization as retained, when `text` is byte for byte the one this
 * kernel signed and committed for the operation it names. Equality with bytes
 * this kernel signed and kept proves all that verifying them would: signed by
 * this kernel, canonical, in its schema, the one committed. So no signature is
 * checked here, which was a third of the kernel's Ed25519 work per operation
 * (docs/PERFORMANCE.md "Hot-path CPU"). Anything else — unparsable, naming no
 * operation, or differing in a single byte — is undefined, and
 * verifiedAuthorization decides it as before.
 */
function retainedAuthorization(kernel: Kernel, text: string): AuthenticAuthorization | undefined {
  // Longer than any authorization can be (UTF-16 units never outnumber UTF-8 bytes): not parsed here at all.
  if (text.length > ARTIFACT_MAX_BYTES.authorization) return undefined;
  let envelope: Envelope;
  try {
    envelope = JSON.parse(text) as Envelope;
  } catch {
    return undefined;
  }
  const operationId = (envelope?.body as Partial<AuthorizationBody> | undefined)?.invocation?.operation_id;
  if (typeof operationId !== 'string') return undefined;
  const operation = kernel.store.operations.get(operationId);
  if (operation?.authorization !== text || operation.authorization_digest === null) return undefined;
  const body = envelope.body as AuthorizationBody;
  return { operation, authorization: { kind: 'authorization', text, envelope, body, digest: operation.authorization_digest } };
}

/** Verified as any artifact from outside: signed under one of this kernel's key epochs, and the one committed. */
function verifiedAuthorization(kernel: Kernel, text: string): AuthenticAuthorization {
  let authorization: SignedArtifact<'authorization'>;
  try {
    // Signed under any of this kernel's key epochs: one authorized before a kernel rotation is settled as any other.
    authorization = decodeArtifact('authorization', text, { trustedSigners: kernel.store.kernelEpochs().map((row) => row.public_key) });
  } catch (error) {
    const cause = toCustodyError(error);
    throw new CustodyError('authorization_invalid', `authorization is not one this kernel signed: ${cause.code}: ${cause.message}`, { cause });
  }
  const operationId = authorization.body.invocation.operation_id;
  const operation = kernel.store.operations.get(operationId);
  if (!operation) throw new CustodyError('operation_unknown', `authorization names operation ${operationId}, which this kernel does not hold`);
  if (operation.authorization !== authorization.text) {
    throw new CustodyError(
      'authorization_invalid',
      `authorization ${authorization.digest.slice(0, 16)}… is not the one committed for operation ${operation.request_id}`,
    );
  }
  return { operation, authorization };
}

export function checkReport(kernel: Kernel, { operation, authorization }: AuthenticAuthorization, text: string): SignedArtifact<'report'> {
  const addressed = authorization.body.executor;
  const pin = kernel.store.pins.current(addressed.id);
  if (!pin) throw new CustodyError('executor_unknown', `executor ${addressed.id} is not pinned`);
  const addressedPin = kernel.store.pins.at(addressed.id, addressed.key_epoch);
  if (!addressedPin || addressedPin.public_key !== addressed.public_key) {
    throw new CustodyError(
      'epoch_stale',
      `the authorization of ${operation.request_id} is for executor ${addressed.id} epoch ${addressed.key_epoch} key ${addressed.public_key.slice(0, 16)}…, which is not pinned; epoch ${pin.key_epoch} superseded it`,
    );
  }
  // The report is signed under the epoch it names: the one addressed, or a later one its executor rotated
  // to by a statement (docs/PROTOCOL.md §12) — a report signed after a rotation, an epoch_retired refusal.
  const signedEpoch = reportEpochOf(text);
  if (signedEpoch !== null && signedEpoch > pin.key_epoch) {
    throw new CustodyError(
      'epoch_unpinned',
      `the report of ${operation.request_id} is signed under executor ${addressed.id} epoch ${signedEpoch}, and epoch ${pin.key_epoch} is the last pinned; carry the executor's rotation statement to the kernel first (the supervisor does it at the executor's hello), then settle again`,
    );
  }
  const signerPin = signedEpoch !== null && signedEpoch >= addressed.key_epoch ? kernel.store.pins.at(addressed.id, signedEpoch) : addressedPin;
  let report: SignedArtifact<'report'>;
  try {
    report = decodeArtifact('report', text, { trustedSigners: [(signerPin ?? addressedPin).public_key] });
  } catch (error) {
    const cause = toCustodyError(error);
    throw new CustodyError(
      'report_invalid',
      `report for ${operation.request_id} does not verify under executor ${addressed.id} epoch ${signedEpoch ?? addressed.key_epoch}: ${cause.code}: ${cause.message}`,
      { cause },
    );
  }
  const mismatch = mismatchOf(report.body, authorization, operation);
  if (mismatch) throw new CustodyError('report_invalid', `report for ${operation.request_id} does not belong to its authorization: ${mismatch}`);
  return report;
}

/** The key epoch a report names, read before it is trusted (to pick the pin it must verify under); null if unreadable. */
function reportEpochOf(text: string): number | null {
  try {
    const epoch = (readEnvelope(text).envelope.body as { key_epoch?: unknown }).key_epoch;
    return typeof epoch === 'number' && Number.isSafeInteger(epoch) ? epoch : null;
  } catch {
    return null;
  }
}

/** Why an authentic report does not belong to its authorization, or null when it does. */
function mismatchOf(body: ReportBody, authorization: SignedArtifact<'authorization'>, operation: OperationRow): string | null {
  const addressed = authorization.body.executor;
  if (body.authorization_digest !== authorization.digest) {
    return `it names authorization ${body.authorization_digest.slice(0, 16)}…, not ${authorization.digest.slice(0, 16)}…`;
  }
  if (body.operation_id !== operation.operation_id) return `it names operation ${body.operation_id.slice(0, 16)}…`;
  if (body.executor_id !== addressed.id || body.key_epoch < addressed.key_epoch) {
    return `it names executor ${body.executor_id} epoch ${body.key_epoch}, the authorization ${addressed.id} epoch ${addressed.key_epoch}`;
  }
  if (body.claimed_at === null && body.status !== 'never_claimed') return `a ${body.status} report must carry its claim time`;
  if (body.refusal !== undefined) {
    if (body.status !== 'never_claimed') return `a ${body.status} report carries a refusal; only never_claimed may`;
    if (!isErrorCode(body.refusal.code)) return `its refusal code ${body.refusal.code} is not an error code`;
  }
  // The completion receipt carries output_digest and the settle answer the output: they must be of one another (§8).
  const digest = body.output === null ? null : canonicalDigest(body.output);
  if (body.output_digest !== digest) return `its output_digest ${String(body.output_digest).slice(0, 16)}… is not the SHA-256 of its output's canonical bytes (${String(digest).slice(0, 16)}…)`;
  return null;
}
