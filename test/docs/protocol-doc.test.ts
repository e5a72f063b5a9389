// docs/PROTOCOL.md cannot drift from the code: its generated blocks and
// docs/vectors/protocol.json must equal what the code produces now, and the
// vectors must check out with independent primitives (node:crypto's HKDF,
// HMAC and Ed25519), not only with custody's own.
import { expect } from 'chai';
import { createHmac, createPublicKey, hkdfSync, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { PROTOCOL_FILE, VECTORS_FILE, buildVectors, renderProtocolDoc } from '../../scripts/protocol-vectors.js';

const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const publicKey = (hex: string) => createPublicKey({ key: Buffer.concat([SPKI_PREFIX, Buffer.from(hex, 'hex')]), format: 'der', type: 'spki' });

describe('docs/PROTOCOL.md', () => {
  const vectors = buildVectors();

  it('holds the vectors the code produces now (run `npm run vectors` after a change)', () => {
    expect(JSON.parse(readFileSync(VECTORS_FILE, 'utf8'))).to.deep.equal(vectors);
    const doc = readFileSync(PROTOCOL_FILE, 'utf8');
    expect(renderProtocolDoc(doc, vectors) === doc, 'a generated block of PROTOCOL.md is stale').to.equal(true);
  });

  it('derives the directional keys as documented, checked with node:crypto HKDF', () => {
    const { session } = vectors;
    const derive = (info: string) =>
      Buffer.from(hkdfSync('sha256', Buffer.from(session.session_key, 'hex'), Buffer.from(session.sid, 'hex'), Buffer.from(info, 'ascii'), 32)).toString('hex');
    expect(derive(session.hkdf_info_to_child)).to.equal(session.key_to_child);
    expect(derive(session.hkdf_info_to_supervisor)).to.equal(session.key_to_supervisor);
  });

  it('MACs every byte before the trailer, checked with node:crypto HMAC', () => {
    const mac = createHmac('sha256', Buffer.from(vectors.session.key_to_child, 'hex')).update(vectors.ping_covered).digest('hex');
    expect(mac).to.equal(vectors.ping_mac);
    expect(vectors.ping_line).to.equal(`${vectors.ping_covered},"mac":"${mac}"}`);
    const line = vectors.pong_line;
    const covered = line.slice(0, line.length - 74);
    const pongMac = createHmac('sha256', Buffer.from(vectors.session.key_to_supervisor, 'hex')).update(covered).digest('hex');
    expect(line.endsWith(`,"mac":"${pongMac}"}`)).to.equal(true);
  });

  it('signs the hello over the documented canonical bytes, checked with node:crypto Ed25519', () => {
    const hello = JSON.parse(vectors.hello.line) as { body: { signature: string; public_key: string } };
    expect(hello.body.public_key).to.equal(vectors.hello.kernel_public_key);
    const valid = verify(null, Buffer.from(vectors.hello.signed_message), publicKey(hello.body.public_key), Buffer.from(hello.body.signature, 'hex'));
    expect(valid).to.equal(true);
  });

  it('has artifacts that verify, each signed over its envelope without the signature', () => {
    const { artifacts } = vectors;
    const kernelKey = vectors.hello.kernel_public_key;
    for (const [kind, signer] of [
      ['capability', kernelKey],
      ['authorization', kernelKey],
      ['receipt', kernelKey],
      ['report', artifacts.executor_public_key],
    ] as const) {
      const { text, digest } = artifacts[kind];
      expect(decodeArtifact(kind, text, { trustedSigners: [signer] }).digest).to.equal(digest);
      const { signature, ...unsigned } = JSON.parse(text) as Record<string, unknown> & { signature: string };
      expect(text, `${kind} is stored as the JCS bytes of its envelope`).to.equal(canonical({ ...unsigned, signature }));
      expect(verify(null, Buffer.from(canonical(unsigned)), publicKey(signer), Buffer.from(signature, 'hex'))).to.equal(true);
    }
  });
});

/** A minimal independent JCS for these vectors (plain strings, integers, null; no exotic values). */
function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  const record = value as Record<string, unknown>;
  return `{${Object.keys(record).sort().map((k) => `${JSON.stringify(k)}:${canonical(record[k])}`).join(',')}}`;
}
