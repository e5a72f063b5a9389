// Building and signing a report (DESIGN §5). Called inside the transaction
// that retains it, once the claim and the finish time are known; the stored
// text is what every replay returns.
import { type SignedArtifact, signArtifact } from '../shared/artifacts/artifact.js';
import { canonicalBytes } from '../shared/canonical/jcs.js';
import { canonicalDigest } from '../shared/canonical/digest.js';
import { type Signer } from '../shared/crypto/ed25519.js';
import { ARTIFACT_MAX_BYTES, type ReportStatus } from '../shared/protocol/artifacts.js';
import { type JsonValue } from '../shared/protocol/common.js';
import { type ReportSigner } from './ledger/ledger.js';
import { type LedgerConfig } from './ledger/stores.js';

/** Room left in a report for the envelope and the other members. */
const OUTPUT_MAX_BYTES = ARTIFACT_MAX_BYTES.report - 8 * 1024;

export interface ReportContent {
  readonly authorizationDigest: string;
  readonly status: ReportStatus;
  readonly output: JsonValue | null;
  readonly costUnits: number | null;
}

/**
 * An output too large for a report would leave an effect that happened with
 * no report that can say so; it is replaced by its size and digest, which
 * still prove what it was.
 */
export function boundedOutput(output: JsonValue | null): { output: JsonValue | null; omitted: boolean } {
  if (output === null) return { output: null, omitted: false };
  const bytes = canonicalBytes(output);
  if (bytes.length <= OUTPUT_MAX_BYTES) return { output, omitted: false };
  return { output: { custody_output_omitted: { bytes: bytes.length, sha256: canonicalDigest(output) } }, omitted: true };
}

export function reportSigner(signer: Signer, config: LedgerConfig, content: ReportContent): ReportSigner {
  return (claim, finishedAt): SignedArtifact<'report'> => {
    const { output } = boundedOutput(content.output);
    return signArtifact(
      'report',
      {
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
      },
      signer,
    );
  };
}
