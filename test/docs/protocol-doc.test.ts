// docs/PROTOCOL.md cannot drift from the code: its generated blocks and
// docs/vectors/protocol.json must equal what the code produces now, and the
// vectors must check out with independent primitives (node:crypto's HKDF,
// HMAC and Ed25519), not only with custody's own.
import { expect } from 'chai';
import { createHash, createHmac, createPublicKey, hkdfSync, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { PROTOCOL_FILE, VECTORS_FILE, buildVectors, renderProtocolDoc, unrenderedMarkers } from '../../scripts/protocol-vectors.js';

const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const publicKey = (hex: string) => createPublicKey({ key: Buffer.concat([SPKI_PREFIX, Buffer.from(hex, 'hex')]), format: 'der', type: 'spki' });

describe('docs/PROTOCOL.md', () => {
  const vectors = buildVectors();

  it('holds the vectors the code produces now (run `npm run vectors` after a change)', () => {
    expect(JSON.parse(readFileSync(VECTORS_FILE, 'utf8'))).to.deep.equal(vectors);
    const doc = readFileSync(PROTOCOL_FILE, 'utf8');
    expect(renderProtocolDoc(doc, vectors) === doc, 'a generated block of PROTOCOL.md is stale').to.equal(true);
    expect(unrenderedMarkers(doc), 'generated markers the script cannot render').to.deep.equal([]);
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
    expect(vectors.chains.kernel.ping_line).to.equal(`${vectors.ping_covered},"mac":"${mac}"}`);
  });

  for (const role of ['kernel', 'executor'] as const) {
    it(`replays the ${role} chain end to end: preamble, hello, ping and pong under one session, as a host would`, () => {
      const chain = vectors.chains[role];
      const preamble = JSON.parse(chain.preamble_line) as { sid: string; key: string; role: string; name: string; challenge: string; pins: { kernel: string | null } };
      expect(preamble.role).to.equal(role);
      const derive = (info: string) =>
        Buffer.from(hkdfSync('sha256', Buffer.from(preamble.key, 'hex'), Buffer.from(preamble.sid, 'hex'), Buffer.from(info, 'ascii'), 32));
      const toChild = derive('custody.v1 frame mac supervisor->child');
      const toSupervisor = derive('custody.v1 frame mac child->supervisor');
      const open = (line: string, key: Buffer) => {
        const covered = line.slice(0, line.length - 74);
        const mac = createHmac('sha256', key).update(covered).digest('hex');
        expect(line, 'the trailer carries the MAC of every byte before it').to.equal(`${covered},"mac":"${mac}"}`);
        return JSON.parse(line) as { sid: string; seq: number; from: string; kind: string; id: string; body: Record<string, unknown> };
      };
      const hello = open(chain.hello_line, toSupervisor);
      expect([hello.sid, hello.seq, hello.from, hello.kind, hello.id]).to.deep.equal([preamble.sid, 0, role, 'hello', 'hello']);
      const body = hello.body as { role: string; id: string; public_key: string; key_epoch: number; head: number; signature: string };
      expect([body.role, body.id, body.public_key]).to.deep.equal([role, preamble.name, vectors.identities[role].public_key]);
      const signed = canonical({ custody: 'custody.hello.v1', sid: preamble.sid, challenge: preamble.challenge, role, id: body.id, key_epoch: body.key_epoch, head: body.head });
      expect(signed).to.equal(chain.hello_signed_message);
      expect(verify(null, Buffer.from(signed), publicKey(body.public_key), Buffer.from(body.signature, 'hex'))).to.equal(true);
      if (role === 'executor') expect(preamble.pins.kernel).to.equal(vectors.identities.kernel.public_key);
      const ping = open(chain.ping_line, toChild);
      const pong = open(chain.pong_line, toSupervisor);
      expect([ping.seq, ping.from, ping.kind]).to.deep.equal([0, 'supervisor', 'ping']);
      expect([pong.sid, pong.seq, pong.from, pong.kind, pong.id]).to.deep.equal([preamble.sid, 1, role, 'result', ping.id]);
    });
  }

  it('publishes the exact text behind each binding digest', () => {
    for (const [name, { input, sha256 }] of Object.entries(vectors.digests)) {
      expect(createHash('sha256').update(input, 'utf8').digest('hex'), name).to.equal(sha256);
      expect(canonical(JSON.parse(input)), `${name} input is JCS text`).to.equal(input);
    }
    const authorization = JSON.parse(vectors.artifacts.authorization.text) as { body: { invocation: Record<string, string> } };
    expect(authorization.body.invocation.parameters_digest).to.equal(vectors.digests.parameters_digest.sha256);
    expect(authorization.body.invocation.request_binding_hash).to.equal(vectors.digests.request_binding_hash.sha256);
    expect(authorization.body.invocation.operation_id).to.equal(vectors.digests.operation_id.sha256);
    expect(authorization.body.invocation.capability_digest).to.equal(createHash('sha256').update(vectors.artifacts.capability.text).digest('hex'));
  });

  it('has artifacts that verify, each signed over its envelope without the signature', () => {
    const { artifacts } = vectors;
    const kernelKey = vectors.identities.kernel.public_key;
    for (const [kind, signer] of [
      ['capability', kernelKey],
      ['authorization', kernelKey],
      ['receipt', kernelKey],
      ['report', vectors.identities.executor.public_key],
    ] as const) {
      const { text, digest } = artifacts[kind];
      expect(decodeArtifact(kind, text, { trustedSigners: [signer] }).digest).to.equal(digest);
      expect(createHash('sha256').update(text).digest('hex')).to.equal(digest);
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
