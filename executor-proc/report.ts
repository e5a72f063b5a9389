// Building and signing a report (ARCHITECTURE.md §5). Called inside the transaction
// that retains it, once the claim and the finish time are known; the stored
// text is what every replay returns.
import { type SignedArtifact, signArtifact } from '../shared/artifacts/artifact.js';
import { canonicalBytes } from '../shared/canonical/jcs.js';
import { canonicalDigest } from '../shared/canonical/digest.js';
import type { Signer } from '../shared/crypto/ed25519.js';
import { CustodyError, isCustodyError } from '../shared/errors.js';
import { ARTIFACT_MAX_BYTES, ARTIFACT_MAX_DEPTH, type ArtifactBody, type ReportStatus } from '../shared/protocol/artifacts.js';
import { scanJson } from '../shared/wire/decode.js';
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

/**
 * The deepest report this session can always deliver: the kernel's `settle`
 * answer carries the output as JSON in its body, two levels into the frame,
 * as the report's envelope and body are two levels into the artifact; so a
 * report nesting no deeper than the session's bound (and never past
 * ARTIFACT_MAX_DEPTH, which every verifier holds) has an output that fits
 * both (docs/PROTOCOL.md §7.4).
 */
function reportMaxDepth(sessionMaxDepth: number): number {
  return Math.min(ARTIFACT_MAX_DEPTH, sessionMaxDepth);
}

/** What a signed report must fit: its bytes (reportMaxBytes) and its nesting (reportMaxDepth). */
export interface ReportBound {
  readonly bytes: number;
  readonly depth: number;
}

/** The report bound of a session's frame limits. */
export function reportBoundOf(limits: { readonly maxFrameBytes: number; readonly maxDepth: number }): ReportBound {
  return { bytes: reportMaxBytes(limits.maxFrameBytes), depth: reportMaxDepth(limits.maxDepth) };
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
 * large or deep for the session's frames could never be delivered: either
 * way the output is replaced by `omittedOutput`. `bound` bounds the whole
 * signed report (`ReportBound`); `onOmitted` hears of each replacement.
 */
export function reportSigner(
  signer: Signer,
  config: LedgerConfig,
  content: ReportContent,
  bound: ReportBound,
  onOmitted: (outputBytes: number) => void = () => undefined,
): ReportSigner {
  return (claim, finishedAt): SignedArtifact<'report'> => {
    const signWith = (output: JsonValue | null) => signWithin(bound, signer, {
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
    let report = outputBytes < bound.bytes ? signWith(output) : null;
    if (report === null && output !== null) {
      onOmitted(outputBytes);
      report = signWith(omittedOutput(output));
    }
    if (report === null) {
      throw new CustodyError('internal', `report of operation ${claim.operationId} does not fit ${bound.bytes} bytes and ${bound.depth} levels even without its output`);
    }
    return report;
  };
}

/**
 * The signed report, or null when its text is longer than `bound.bytes`
 * (measured, since the frame carries the text) or nests deeper than
 * `bound.depth`: either way the output is what gets replaced.
 */
function signWithin(bound: ReportBound, signer: Signer, body: ArtifactBody<'report'>): SignedArtifact<'report'> | null {
  let report: SignedArtifact<'report'>;
  try {
    report = signArtifact('report', body, signer);
  } catch (error) {
    if (isCustodyError(error, 'artifact_too_large') || isCustodyError(error, 'artifact_too_deep')) return null;
    throw error;
  }
  if (Buffer.byteLength(report.text, 'utf8') > bound.bytes) return null;
  // signArtifact held ARTIFACT_MAX_DEPTH; a session bound below it is scanned here.
  return bound.depth >= ARTIFACT_MAX_DEPTH || scanJson(report.text, bound.depth, false).depth <= bound.depth ? report : null;
}
