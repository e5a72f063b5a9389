// Building and signing a report (ARCHITECTURE.md §5). Called inside the transaction
// that retains it, once the claim and the finish time are known; the stored
// text is what every replay returns.
import { type SignedArtifact, signArtifact } from '../shared/artifacts/artifact.js';
import { canonicalBytes } from '../shared/canonical/jcs.js';
import { canonicalDigest } from '../shared/canonical/digest.js';
import type { Signer } from '../shared/crypto/ed25519.js';
import { CustodyError, isCustodyError } from '../shared/errors.js';
import { ARTIFACT_MAX_BYTES, type ArtifactBody, type ReportStatus } from '../shared/protocol/artifacts.js';
import type { JsonValue } from '../shared/protocol/common.js';
import type { ReportSigner } from './ledger/ledger.js';
import type { LedgerConfig } from './ledger/stores.js';

/**
 * Room in a frame for all but the report: the envelope (about 400 bytes with
 * a 128-byte id), an answer's other members, and the authorization that
 * travels beside the report in the supervisor's kernel `settle` (at most
 * about 1.8 KiB escaped, every identifier at 128 bytes).
 */
export const FRAME_ROOM_BYTES = 4096;

/** Below this even a report without its output might not fit: with the omission marker it is at most about 1.1 KiB. */
export const REPORT_MIN_BYTES = 4096;

/**
 * The largest report this session can always deliver. A report travels as a
 * JSON string inside a frame, and escaping can double it (every `"` and `\`
 * of its JCS text becomes two bytes; JCS has no raw control characters), so
 * a retained report larger than half the frame could never be answered.
 */
export function reportMaxBytes(maxFrameBytes: number): number {
  return Math.min(ARTIFACT_MAX_BYTES.report, Math.floor((maxFrameBytes - FRAME_ROOM_BYTES) / 2));
}

export interface ReportContent {
  readonly authorizationDigest: string;
  readonly status: ReportStatus;
  readonly output: JsonValue | null;
  readonly costUnits: number | null;
  /** For a never_claimed report of arguments refused before any claim: the code and the adapter's message. */
  readonly refusal?: { readonly code: string; readonly message: string };
}

/** What an output too large for its report is replaced by: its size and digest, which still prove what it was. */
export function omittedOutput(output: JsonValue): JsonValue {
  return { custody_output_omitted: { bytes: canonicalBytes(output).length, sha256: canonicalDigest(output) } };
}

/**
 * An output too large (or nested too deep) for a report would leave an
 * effect that happened with no report that can say so, and a report too
 * large for the session's frames could never be delivered: either way the
 * output is replaced by
 * `omittedOutput`. `maxBytes` bounds the whole signed report
 * (`reportMaxBytes`); `onOmitted` hears of each replacement.
 */
export function reportSigner(
  signer: Signer,
  config: LedgerConfig,
  content: ReportContent,
  maxBytes: number,
  onOmitted: (outputBytes: number) => void = () => undefined,
): ReportSigner {
  return (claim, finishedAt): SignedArtifact<'report'> => {
    const signWith = (output: JsonValue | null) => signWithin(maxBytes, signer, {
      authorization_digest: content.authorizationDigest,
      operation_id: claim.operationId,
      executor_id: config.executorId,
      key_epoch: config.keyEpoch,
      claim_id: claim.claimId,
      claimed_at: claim.claimedAt,
      finished_at: finishedAt,
      status: content.status,
      output,
      output_digest: output === null ? null : canonicalDigest(output),
      realized_cost_units: content.costUnits,
      ...(content.refusal ? { refusal: content.refusal } : {}),
    });
    const { output } = content;
    // An output alone past the bound is not signed only to be measured.
    const outputBytes = output === null ? 0 : canonicalBytes(output).length;
    let report = outputBytes < maxBytes ? signWith(output) : null;
    if (report === null && output !== null) {
      onOmitted(outputBytes);
      report = signWith(omittedOutput(output));
    }
    if (report === null) {
      throw new CustodyError('internal', `report of operation ${claim.operationId} does not fit ${maxBytes} bytes even without its output`);
    }
    return report;
  };
}

/**
 * The signed report, or null when its text is longer than `maxBytes`
 * (measured, since the frame carries the text) or nests deeper than an
 * artifact may: either way the output is what gets replaced.
 */
function signWithin(maxBytes: number, signer: Signer, body: ArtifactBody<'report'>): SignedArtifact<'report'> | null {
  let report: SignedArtifact<'report'>;
  try {
    report = signArtifact('report', body, signer);
  } catch (error) {
    if (isCustodyError(error, 'artifact_too_large') || isCustodyError(error, 'artifact_too_deep')) return null;
    throw error;
  }
  return Buffer.byteLength(report.text, 'utf8') <= maxBytes ? report : null;
}
