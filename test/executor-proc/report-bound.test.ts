// A report must fit the session's frames: it travels as a JSON string inside
// an answer, where escaping can double it. An output that would make it too
// large is retained as its size and digest, and the report is delivered —
// on execute, on replay, on reconcile_operation and through claims.get.
import { expect } from 'chai';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { canonicalDigest } from '../../shared/canonical/digest.js';
import { canonicalBytes } from '../../shared/canonical/jcs.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import { ARTIFACT_MAX_BYTES, ARTIFACT_MAX_DEPTH } from '../../shared/protocol/artifacts.js';
import { sealFrame } from '../../shared/wire/frame-codec.js';
import type { LedgerConfig } from '../../executor-proc/ledger/stores.js';
import type { OperationRecord } from '../../executor-proc/ledger/records.js';
import { reportMaxBytes, reportSigner } from '../../executor-proc/report.js';
import { type Executor, type Home, authorize, executeBody, makeHome, provisioned, removeHome, startExecutor, stopExecutor } from './helpers.js';
import { refusalOf } from '../helpers/codes.js';
import { eventually } from '../helpers/eventually.js';

const LOW_FRAME_BYTES = 131_072;
const REPORT_BOUND = reportMaxBytes(LOW_FRAME_BYTES);

function bodyOf(executor: Executor, report: string) {
  return decodeArtifact('report', report, { trustedSigners: [executor.identity.public_key] }).body;
}

describe('executor-proc report bound', function () {
  this.timeout(30_000);

  it('bounds reports by the artifact cap at the default frame bound, and by half the frame less 4 KiB below it', () => {
    expect(reportMaxBytes(1_048_576)).to.equal(ARTIFACT_MAX_BYTES.report);
    expect(reportMaxBytes(LOW_FRAME_BYTES)).to.equal(63_488);
  });

  it('signs a report of exactly the bound, all quotes, that still fits a frame once escaped', () => {
    const signer = Signer.fromSeed(Buffer.alloc(32, 5));
    const config = { executorId: 'alpha', keyEpoch: 1 } as LedgerConfig;
    const claim = { operationId: 'e'.repeat(64), claimId: `c${'0'.repeat(24)}`, claimedAt: 1_767_225_600_000 } as OperationRecord;
    const sign = (count: number) =>
      reportSigner(signer, config, { authorizationDigest: 'a'.repeat(64), status: 'completed', output: { text: '"'.repeat(count) }, costUnits: null }, { bytes: REPORT_BOUND, depth: ARTIFACT_MAX_DEPTH })(claim, 1_767_225_600_001);
    const overhead = Buffer.byteLength(sign(0).text);
    const count = Math.floor((REPORT_BOUND - overhead) / 2);
    const report = sign(count);
    expect(Buffer.byteLength(report.text)).to.be.within(REPORT_BOUND - 1, REPORT_BOUND);
    expect(report.body.output).to.deep.equal({ text: '"'.repeat(count) });
    const frame = sealFrame(
      { sid: '0'.repeat(32), seq: 1, from: 'executor', kind: 'result', id: 'x'.repeat(128), body: { report: report.text, status: 'reconciled_not_applied', replayed: false } },
      Buffer.alloc(32),
    );
    expect(frame.length - 1).to.be.at.most(LOW_FRAME_BYTES);
    expect((sign(count + 1).body.output as Record<string, unknown>).custody_output_omitted).to.be.an('object');
  });

  describe(`a session at max_frame_bytes ${LOW_FRAME_BYTES}`, () => {
    let home: Home;
    let executor: Executor;

    before(async () => {
      home = makeHome();
      await provisioned(home);
      executor = await startExecutor(home, { maxFrameBytes: LOW_FRAME_BYTES });
    });

    after(async () => {
      await stopExecutor(executor);
      removeHome(home);
    });

    it('retains an output too large for its frames as its size and digest, and delivers that report on execute, replay, reconcile and claims.get', async () => {
      const args = { char: 'x', count: 200_000 };
      const auth = authorize(executor, { tool: 'fixture/large', args });
      const result = await executor.channel.request('execute', executeBody(auth));
      expect(result.status).to.equal('completed');
      expect(Buffer.byteLength(result.report)).to.be.at.most(REPORT_BOUND);
      const output = { text: 'x'.repeat(args.count) };
      expect(bodyOf(executor, result.report).output).to.deep.equal({
        custody_output_omitted: { bytes: canonicalBytes(output).length, sha256: canonicalDigest(output) },
      });
      await eventually(() => executor.stderr.some((line) => line.includes('"report_output_omitted"') && line.includes(auth.operationId)), 3000, 'report_output_omitted logged');
      expect(await executor.channel.request('execute', executeBody(auth))).to.deep.equal({ ...result, replayed: true });
      const reconciled = await executor.channel.request('reconcile_operation', { authorization: auth.text, expected: auth.expected });
      expect(reconciled).to.deep.equal({ ...result, replayed: true });
      expect((await executor.channel.request('claims.get', { operation_id: auth.operationId })).claim?.report).to.equal(result.report);
      expect(executor.channel.state).to.equal('open');
    });

    it('keeps an output whose report nests at the artifact depth bound (24) verbatim, and omits one a level deeper, so the kernel can verify every report signed', async () => {
      const deepOutput = async (levels: number) => {
        const auth = authorize(executor, { tool: 'fixture/deep', args: { levels } });
        const result = await executor.channel.request('execute', executeBody(auth));
        expect(result.status).to.equal('completed');
        return bodyOf(executor, result.report).output as Record<string, unknown>;
      };
      // The report's envelope and its body are two levels; the output the rest.
      const atBound = await deepOutput(ARTIFACT_MAX_DEPTH - 2);
      expect(atBound).to.have.property('d');
      expect(atBound).not.to.have.property('custody_output_omitted');
      const past = await deepOutput(ARTIFACT_MAX_DEPTH - 1);
      expect(past).to.have.property('custody_output_omitted');
      expect(executor.channel.state).to.equal('open');
    });

    it('keeps an output that fits verbatim, even one whose every byte doubles when escaped into the frame, and omits one a byte pair larger', async () => {
      const sized = async (count: number) => {
        const auth = authorize(executor, { tool: 'fixture/large', args: { char: '"', count } });
        const { report } = await executor.channel.request('execute', executeBody(auth));
        return report;
      };
      const overhead = Buffer.byteLength(await sized(0));
      const count = Math.floor((REPORT_BOUND - overhead) / 2);
      const atBound = await sized(count);
      expect(Buffer.byteLength(atBound)).to.be.within(REPORT_BOUND - 1, REPORT_BOUND);
      expect(bodyOf(executor, atBound).output).to.deep.equal({ text: '"'.repeat(count) });
      const past = bodyOf(executor, await sized(count + 1)).output as Record<string, unknown>;
      expect(past.custody_output_omitted).to.deep.include({ bytes: canonicalBytes({ text: '"'.repeat(count + 1) }).length });
      expect(executor.channel.state).to.equal('open');
    });
  });

  it('under a session nesting bound below the artifact\'s (max_depth 12), keeps an output whose report nests 12 levels and omits one a level deeper: the kernel\'s settle answer carries the output two levels into its frame', async () => {
    const home = makeHome();
    try {
      await provisioned(home);
      const shallow = await startExecutor(home, { maxDepth: 12 });
      const deepOutput = async (levels: number) => {
        const auth = authorize(shallow, { tool: 'fixture/deep', args: { levels } });
        return bodyOf(shallow, (await shallow.channel.request('execute', executeBody(auth))).report).output as Record<string, unknown>;
      };
      expect(await deepOutput(10)).to.have.property('d');
      expect(await deepOutput(11)).to.have.property('custody_output_omitted');
      await stopExecutor(shallow);
    } finally {
      removeHome(home);
    }
  });

  it('refuses to serve a session whose frames could not carry even a report without its output, and serves at the lowest that can', async () => {
    const home = makeHome();
    try {
      await provisioned(home);
      const refused = await refusalOf(startExecutor(home, { maxFrameBytes: 12_287 }));
      expect(refused.code).to.equal('config_invalid');
      expect(refused.message).to.match(/max_frame_bytes 12287 leaves reports 4095 bytes; an executor needs at least 12288/);
      const lowest = await startExecutor(home, { maxFrameBytes: 12_288 });
      const auth = authorize(lowest, { tool: 'fixture/large', args: { char: 'x', count: 8_000 } });
      const result = await lowest.channel.request('execute', executeBody(auth));
      expect(bodyOf(lowest, result.report).output).to.have.property('custody_output_omitted');
      await stopExecutor(lowest);
    } finally {
      removeHome(home);
    }
  });
});
