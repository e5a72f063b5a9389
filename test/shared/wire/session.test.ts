import { expect } from 'chai';
import { DEFAULT_FRAME_LIMITS } from '../../../shared/wire/frame-reader.js';
import { MAC_TRAILER_BYTES, computeMac, encodeCovered, sealFrame } from '../../../shared/wire/frame-codec.js';
import { SessionEndpoint } from '../../../shared/wire/session.js';
import { type SessionSecrets, createSessionSecrets, deriveDirectionKey } from '../../../shared/wire/session-keys.js';
import { codeOf } from '../../helpers/codes.js';

function pair(secrets: SessionSecrets = createSessionSecrets()) {
  const supervisor = new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: DEFAULT_FRAME_LIMITS });
  const child = new SessionEndpoint({ secrets, side: 'child', self: 'kernel', peer: 'supervisor', limits: DEFAULT_FRAME_LIMITS });
  return { secrets, supervisor, child };
}

const strip = (line: Buffer) => line.subarray(0, line.length - 1);


describe('session endpoints', () => {
  it('carry a frame from one side to the other with rising sequence numbers', () => {
    const { supervisor, child } = pair();
    for (let i = 0; i < 3; i++) {
      const frame = child.open(strip(supervisor.seal('ping', `q${i}`, {})));
      expect(frame).to.include({ seq: i, from: 'supervisor', kind: 'ping', id: `q${i}` });
    }
    expect(supervisor.open(strip(child.seal('result', 'q0', { now: 1 })))).to.include({ seq: 0, from: 'kernel' });
  });

  it('put the MAC last, at a fixed width, over every byte before it', () => {
    const { secrets, supervisor } = pair();
    const line = strip(supervisor.seal('ping', 'q1', {}));
    const covered = line.subarray(0, line.length - MAC_TRAILER_BYTES);
    const mac = computeMac(deriveDirectionKey(secrets, 'to-child'), covered).toString('hex');
    expect(line.subarray(covered.length).toString()).to.equal(`,"mac":"${mac}"}`);
    expect(covered.toString()).to.equal(`{"v":1,"sid":"${secrets.sid}","seq":0,"from":"supervisor","kind":"ping","id":"q1","body":{}`);
  });

  it('refuse a frame whose bytes were changed: bad_mac', () => {
    const { supervisor, child } = pair();
    const line = Buffer.from(strip(supervisor.seal('echo', 'q1', { n: 1 })));
    line[line.indexOf('"n":1') + 4] = 0x32; // "n":2
    expect(codeOf(() => child.open(line))).to.equal('bad_mac');
  });

  it('refuse a frame reflected back at its sender: frame_reflected', () => {
    const { supervisor } = pair();
    expect(codeOf(() => supervisor.open(strip(supervisor.seal('ping', 'q1', {}))))).to.equal('frame_reflected');
  });

  it('refuse a frame of another session: bad_mac, as its keys differ', () => {
    const a = pair();
    const b = pair();
    expect(codeOf(() => b.child.open(strip(a.supervisor.seal('ping', 'q1', {}))))).to.equal('bad_mac');
  });

  it('refuse a correctly MACed frame naming another session id: wrong_session', () => {
    const { secrets, child } = pair();
    const forged = sealFrame({ sid: 'f'.repeat(32), seq: 0, from: 'supervisor', kind: 'ping', id: 'q1', body: {} }, deriveDirectionKey(secrets, 'to-child'));
    expect(codeOf(() => child.open(strip(forged)))).to.equal('wrong_session');
  });

  it('refuse a correctly MACed frame from an unexpected role: wrong_sender', () => {
    const { secrets, child } = pair();
    const forged = sealFrame({ sid: secrets.sid, seq: 0, from: 'executor', kind: 'ping', id: 'q1', body: {} }, deriveDirectionKey(secrets, 'to-child'));
    expect(codeOf(() => child.open(strip(forged)))).to.equal('wrong_sender');
  });

  it('refuse replayed, skipped and reordered sequence numbers: bad_sequence', () => {
    const replay = pair();
    const first = strip(replay.supervisor.seal('ping', 'q1', {}));
    replay.child.open(first);
    expect(codeOf(() => replay.child.open(first))).to.equal('bad_sequence');

    const skip = pair();
    skip.supervisor.seal('ping', 'q1', {});
    expect(codeOf(() => skip.child.open(strip(skip.supervisor.seal('ping', 'q2', {}))))).to.equal('bad_sequence');

    const reorder = pair();
    const one = strip(reorder.supervisor.seal('ping', 'q1', {}));
    const two = strip(reorder.supervisor.seal('ping', 'q2', {}));
    expect(codeOf(() => reorder.child.open(two))).to.equal('bad_sequence');
    expect(one.length).to.be.greaterThan(0);
  });

  it('refuse a frame without its MAC trailer: frame_malformed', () => {
    const { child } = pair();
    expect(codeOf(() => child.open(Buffer.from('{"v":1}')))).to.equal('frame_malformed');
    expect(codeOf(() => child.open(Buffer.from(`{"a":1,"mac":"${'A'.repeat(64)}"}`)))).to.equal('frame_malformed');
  });

  describe('read the envelope on its raw bytes (docs/PROTOCOL.md §4.4)', () => {
    /** Covered bytes given verbatim, MACed with the right key: only the layout is wrong. */
    const macedLine = (secrets: SessionSecrets, covered: string) => {
      const bytes = Buffer.from(covered, 'utf8');
      const mac = computeMac(deriveDirectionKey(secrets, 'to-child'), bytes).toString('hex');
      return Buffer.concat([bytes, Buffer.from(`,"mac":"${mac}"}`)]);
    };
    const head = (sid: string) => ({
      v: '"v":1',
      sid: `"sid":"${sid}"`,
      seq: '"seq":0',
      from: '"from":"supervisor"',
      kind: '"kind":"ping"',
      id: '"id":"q1"',
    });

    it('accept the one fixed layout, MACed with the right key (the control case)', () => {
      const { secrets, child } = pair();
      const h = head(secrets.sid);
      const frame = child.open(macedLine(secrets, `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{"a":1}`));
      expect(frame).to.deep.include({ kind: 'ping', id: 'q1', seq: 0, body: { a: 1 } });
    });

    const cases: Array<[string, (h: ReturnType<typeof head>) => string]> = [
      ['sid before v', (h) => `{${[h.sid, h.v, h.seq, h.from, h.kind, h.id].join(',')},"body":{}`],
      ['sid given twice in the header', (h) => `{${[h.v, h.sid, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{}`],
      ['sid repeated after the body', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{},"sid":"${'f'.repeat(32)}"`],
      ['an extra member', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"x":1,"body":{}`],
      ['whitespace between tokens', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(', ')},"body":{}`],
      ['a member twice inside the body', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{"a":1,"b":{"c":1,"c":2}}`],
      ['an escaped member name equal to another', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{"a":1,"\\u0061":2}`],
      ['a seq with a leading zero', (h) => `{${[h.v, h.sid, '"seq":00', h.from, h.kind, h.id].join(',')},"body":{}`],
      ['a body that is not an object', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":[1]`],
      ['a space before the body', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body": {}`],
      ['a space after the body', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{} `],
      ['a tab and a carriage return after the body', (h) => `{${[h.v, h.sid, h.seq, h.from, h.kind, h.id].join(',')},"body":{}\t\r`],
    ];
    for (const [what, covered] of cases) {
      it(`refuse a correctly MACed frame with ${what}: frame_malformed`, () => {
        const { secrets, child } = pair();
        expect(codeOf(() => child.open(macedLine(secrets, covered(head(secrets.sid)))))).to.equal('frame_malformed');
        // Nothing was accepted: the next frame in order still carries seq 0.
        expect(child.nextReceiveSeq).to.equal(0);
      });
    }
  });

  it('refuse to seal a frame over the bound, without consuming a sequence number', () => {
    const secrets = createSessionSecrets();
    const small = new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: { maxFrameBytes: 300, maxDepth: 32 } });
    const covered = encodeCovered({ sid: secrets.sid, seq: 0, from: 'supervisor', kind: 'echo', id: 'q1', body: { p: '' } }).length;
    const fits = 300 - MAC_TRAILER_BYTES - covered;
    expect(small.seal('echo', 'q1', { p: 'x'.repeat(fits) }).length).to.equal(301);
    expect(codeOf(() => small.seal('echo', 'q2', { p: 'x'.repeat(fits + 1) }))).to.equal('frame_too_large');
    expect(small.nextSendSeq).to.equal(1);
  });
});
