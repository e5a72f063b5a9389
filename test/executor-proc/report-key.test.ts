// A report waits for the ledger's next grouped transaction; it is signed when
// that transaction writes it, with the key in force then. A key rotation
// committed while it waited (the executor's key.rotate handled in between)
// must not leave a report signed by the key it retired, whose private half
// the rotation destroyed (docs/SECURITY.md "Rotating keys").
import { expect } from 'chai';
import { Signer } from '../../shared/crypto/ed25519.js';
import { ARTIFACT_MAX_DEPTH } from '../../shared/protocol/artifacts.js';
import type { ExecutorContext } from '../../executor-proc/context.js';
import type { VerifiedAuthorization } from '../../executor-proc/authorization.js';
import { retainObservation } from '../../executor-proc/handlers/answers.js';
import type { ReportSigner, RetainOutcome } from '../../executor-proc/ledger/ledger.js';
import type { LedgerConfig } from '../../executor-proc/ledger/stores.js';
import type { OperationRecord } from '../../executor-proc/ledger/records.js';
import { collectingLogger } from '../helpers/children.js';

describe('a report signed in a grouped transaction', () => {
  it('is signed with the key in force when the transaction writes it, not the one in force when it was asked for', async () => {
    const retired = Signer.fromSeed(Buffer.alloc(32, 1));
    const current = Signer.fromSeed(Buffer.alloc(32, 2));
    const claim = { operationId: 'e'.repeat(64), claimId: `c${'0'.repeat(24)}`, claimedAt: 1_767_225_600_000 } as OperationRecord;
    let written: ((sign: ReportSigner) => void) | null = null;
    const pending = new Promise<RetainOutcome>((resolve) => {
      written = (sign) => {
        const report = sign(claim, 1_767_225_600_001);
        resolve({ kind: 'retained', record: { ...claim, report: { text: report.text, status: 'completed', finishedAt: 1_767_225_600_001 } } } as unknown as RetainOutcome);
      };
    });
    let queued: ReportSigner | null = null;
    const context = {
      signer: retired,
      reportBound: { bytes: 65_536, depth: ARTIFACT_MAX_DEPTH },
      log: collectingLogger().log,
      ledger: {
        config: { executorId: 'alpha', keyEpoch: 1 } as LedgerConfig,
        retainReportDurable: (_operationId: string, _status: string, sign: ReportSigner) => {
          queued = sign;
          return pending;
        },
      },
    } as unknown as { -readonly [K in keyof ExecutorContext]: ExecutorContext[K] };
    const verified = { subject: { operationId: claim.operationId, authorizationDigest: 'a'.repeat(64) } } as unknown as VerifiedAuthorization;
    const answered = retainObservation(context, verified, 'completed', { note: 'n' }, null, 'execute');
    // The rotation commits while the report waits for its batch.
    context.signer = current;
    (context.ledger as { config: LedgerConfig }).config = { executorId: 'alpha', keyEpoch: 2 } as LedgerConfig;
    written!(queued!);
    const { report } = await answered;
    const envelope = JSON.parse(report) as { signer: string; body: { key_epoch: number } };
    expect(envelope.signer).to.equal(current.publicKeyHex);
    expect(envelope.body.key_epoch).to.equal(2);
  });
});
