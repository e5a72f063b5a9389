import { expect } from 'chai';
import fc from 'fast-check';
import { canonicalize } from '../../../shared/canonical/jcs.js';
import { BACKENDS, Signer, generateSeed, verifyStrict } from '../../../shared/crypto/ed25519.js';
import { decodeArtifact, readEnvelope, signArtifact } from '../../../shared/artifacts/artifact.js';
import { ARTIFACT_MAX_BYTES, ARTIFACT_MAX_DEPTH, type CapabilityBody, type ReportBody } from '../../../shared/protocol/artifacts.js';
import { codeOf } from '../../helpers/codes.js';

const kernel = Signer.fromSeed(generateSeed());
const stranger = Signer.fromSeed(generateSeed());
const trusted = { trustedSigners: [kernel.publicKeyHex] };

const capability: CapabilityBody = {
  id: 'cap-1',
  tool: 'review-notes/append',
  subject: '*',
  max_invocations: 4,
  max_cost_units: null,
  not_before: 1_700_000_000_000,
  expires_at: 1_700_003_600_000,
  issued_at: 1_700_000_000_000,
};

function report(output: unknown): ReportBody {
  return {
    authorization_digest: 'a'.repeat(64),
    operation_id: 'b'.repeat(64),
    executor_id: 'default',
    key_epoch: 1,
    claim_id: 'claim-1',
    claimed_at: 1_700_000_000_000,
    finished_at: 1_700_000_000_500,
    status: 'completed',
    output: output as ReportBody['output'],
    output_digest: 'c'.repeat(64),
    realized_cost_units: null,
  };
}


describe('signed artifacts', () => {
  it('are the canonical bytes of {schema, signer, body, signature} and decode back to the same body', () => {
    const signed = signArtifact('capability', capability, kernel);
    expect(signed.text).to.equal(canonicalize(JSON.parse(signed.text)));
    expect(JSON.parse(signed.text)).to.have.all.keys('schema', 'signer', 'body', 'signature');
    expect(signed.envelope.schema).to.equal('custody.capability.v1');
    for (const backend of BACKENDS) {
      const decoded = decodeArtifact('capability', signed.text, { ...trusted, backend });
      expect(decoded.body).to.deep.equal(capability);
      expect(decoded.digest).to.equal(signed.digest);
      expect(decoded.text).to.equal(signed.text);
    }
  });

  it('sign the same body to the same bytes every time', () => {
    expect(signArtifact('capability', capability, kernel).text).to.equal(signArtifact('capability', capability, kernel).text);
  });

  it('refuse bytes that are not canonical, even when the value is the same', () => {
    const signed = signArtifact('capability', capability, kernel);
    const spaced = JSON.stringify(JSON.parse(signed.text), null, 1);
    expect(codeOf(() => decodeArtifact('capability', spaced, trusted))).to.equal('artifact_noncanonical');
    const reordered = `{"body":${canonicalize(capability)},"signature":"${signed.envelope.signature}","schema":"custody.capability.v1","signer":"${kernel.publicKeyHex}"}`;
    expect(codeOf(() => decodeArtifact('capability', reordered, trusted))).to.equal('artifact_noncanonical');
  });

  it('refuse an artifact of another kind: a report cannot stand for a capability', () => {
    const signed = signArtifact('report', report(null), kernel);
    expect(codeOf(() => decodeArtifact('capability', signed.text, trusted))).to.equal('artifact_malformed');
  });

  it('refuse a signer that is not trusted, and a changed body or signature', () => {
    const signed = signArtifact('capability', capability, stranger);
    expect(codeOf(() => decodeArtifact('capability', signed.text, trusted))).to.equal('signer_untrusted');

    const genuine = signArtifact('capability', capability, kernel);
    const envelope = JSON.parse(genuine.text) as { body: CapabilityBody; signature: string };
    envelope.body.max_invocations = 400;
    expect(codeOf(() => decodeArtifact('capability', canonicalize(envelope), trusted))).to.equal('signature_invalid');

    const flipped = JSON.parse(genuine.text) as { signature: string };
    flipped.signature = (flipped.signature[0] === '0' ? '1' : '0') + flipped.signature.slice(1);
    expect(codeOf(() => decodeArtifact('capability', canonicalize(flipped), trusted))).to.equal('signature_invalid');
  });

  it('refuse unknown members in the envelope and in the body', () => {
    const genuine = JSON.parse(signArtifact('capability', capability, kernel).text) as Record<string, unknown>;
    expect(codeOf(() => decodeArtifact('capability', canonicalize({ ...genuine, extra: 1 }), trusted))).to.equal('artifact_malformed');
    const withMember = signArtifactUnchecked({ ...capability, extra: 1 });
    expect(codeOf(() => decodeArtifact('capability', withMember, trusted))).to.equal('artifact_malformed');
  });

  it('refuse timestamps that are zero, fractional, past 2^53 - 1, or out of order', () => {
    for (const bad of [0, 1.5, 2 ** 53, -1]) {
      expect(codeOf(() => signArtifact('capability', { ...capability, issued_at: bad }, kernel)), String(bad)).to.equal('artifact_malformed');
    }
    expect(codeOf(() => signArtifact('capability', { ...capability, not_before: capability.expires_at + 1 }, kernel))).to.equal('artifact_malformed');
    expect(signArtifact('capability', { ...capability, issued_at: Number.MAX_SAFE_INTEGER }, kernel).body.issued_at).to.equal(2 ** 53 - 1);
  });

  it('hold a report at exactly its size cap and refuse one byte more', () => {
    const base = signArtifact('report', report(''), kernel).text.length;
    const cap = ARTIFACT_MAX_BYTES.report;
    const atCap = signArtifact('report', report('x'.repeat(cap - base)), kernel);
    expect(Buffer.byteLength(atCap.text)).to.equal(cap);
    expect(decodeArtifact('report', atCap.text, trusted).body.output).to.have.length(cap - base);
    expect(codeOf(() => signArtifact('report', report('x'.repeat(cap - base + 1)), kernel))).to.equal('artifact_too_large');
    const forged = atCap.text.replace('"output":"', '"output":"x');
    expect(codeOf(() => decodeArtifact('report', forged, trusted))).to.equal('artifact_too_large');
  });

  it('sign and verify a report nesting exactly the depth bound, and refuse one a level deeper on both sides', () => {
    const nested = (levels: number): unknown => (levels === 0 ? 'leaf' : [nested(levels - 1)]);
    // The envelope and its body are two levels; each array one more.
    const atBound = signArtifact('report', report(nested(ARTIFACT_MAX_DEPTH - 2)), kernel);
    expect(decodeArtifact('report', atBound.text, trusted).body.output).to.deep.equal(nested(ARTIFACT_MAX_DEPTH - 2));
    expect(codeOf(() => signArtifact('report', report(nested(ARTIFACT_MAX_DEPTH - 1)), kernel))).to.equal('artifact_too_deep');
    const forged = atBound.text.replace('"output":[', '"output":[[').replace('"leaf"]', '"leaf"]]');
    expect(codeOf(() => decodeArtifact('report', forged, trusted))).to.equal('artifact_too_deep');
  });

  // signArtifact builds its texts from one canonical body and decodeArtifact cuts the signed bytes out of the text
  // (artifact.ts envelopeHead); both must stay exactly what RFC 8785 makes of the whole envelope.
  it('sign over, keep and verify exactly the RFC 8785 bytes of the envelope, for any output', () => {
    const tricky = fc.constantFrom('signature', 'signer', '","signature":"', `,"signature":"${'0'.repeat(128)}","signer":"${'1'.repeat(64)}"}`, '\u2028é😀', '\\"');
    const output = fc.oneof(fc.jsonValue({ maxDepth: 4 }), fc.dictionary(fc.oneof(tricky, fc.string({ unit: 'grapheme' })), fc.oneof(tricky, fc.jsonValue({ maxDepth: 2 }))));
    fc.assert(
      fc.property(output, (value) => {
        const body = report(JSON.parse(JSON.stringify(value)) as unknown);
        const signed = signArtifact('report', body, kernel);
        const unsigned = { schema: 'custody.report.v1', signer: kernel.publicKeyHex, body: signed.body };
        expect(signed.text).to.equal(canonicalize({ ...unsigned, signature: signed.envelope.signature }));
        expect(verifyStrict(kernel.publicKey, Buffer.from(canonicalize(unsigned)), Buffer.from(signed.envelope.signature, 'hex'))).to.equal(true);
        expect(decodeArtifact('report', signed.text, trusted).digest).to.equal(signed.digest);
      }),
      { numRuns: 300 },
    );
  });

  it('let a tool read an envelope without trusting its signer', () => {
    const signed = signArtifact('capability', capability, stranger);
    expect(readEnvelope(signed.text)).to.include({ kind: 'capability', text: signed.text });
  });
});

/** Sign a capability body without the schema check, to prove decoding checks it. */
function signArtifactUnchecked(body: Record<string, unknown>): string {
  const unsigned = { schema: 'custody.capability.v1', signer: kernel.publicKeyHex, body };
  return canonicalize({ ...unsigned, signature: kernel.signHex(Buffer.from(canonicalize(unsigned))) });
}
