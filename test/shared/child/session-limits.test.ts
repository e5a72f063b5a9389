// The session's frame limits, as a child judges them from its preamble
// (docs/PROTOCOL.md §11.5): above this build's own, or below room for the
// hello, the preamble is refused (exit 65, nothing on stdout, before any
// store is made); an executor also refuses a frame bound under 12 288 in a
// fatal frame (exit 78). At the bounds the child serves.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SESSION_MIN_DEPTH, SESSION_MIN_FRAME_BYTES } from '../../../shared/child/runtime.js';
import { Signer } from '../../../shared/crypto/ed25519.js';
import { distPath } from '../../helpers/children.js';

interface Ran {
  readonly status: number | null;
  readonly firstFrame: { kind: string; body: Record<string, unknown> } | null;
  readonly stdoutBytes: number;
  readonly events: Array<Record<string, unknown>>;
}

const KERNEL_PIN = Signer.fromSeed(randomBytes(32)).publicKeyHex;

/** Start a child in provision mode with these limits, close its stdin after the preamble, and collect what it did. */
function provisionWith(role: 'kernel' | 'executor', home: string, limits: { max_frame_bytes: number; max_depth: number }): Promise<Ran> {
  const argv = role === 'kernel'
    ? [distPath('kernel-proc', 'main.js'), '--dir', path.join(home, 'kernel')]
    : [distPath('executor-proc', 'main.js'), '--dir', path.join(home, 'executor'), '--resources', path.join(home, 'resources')];
  const preamble = {
    custody: 'custody.preamble.v1', sid: randomBytes(16).toString('hex'), key: randomBytes(32).toString('hex'), role,
    name: role === 'kernel' ? 'kernel' : 'default', challenge: randomBytes(32).toString('hex'), mode: 'provision',
    pins: { kernel: role === 'kernel' ? null : KERNEL_PIN }, limits, settings: {},
  };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', reject);
    child.on('close', (status) => {
      const stdout = Buffer.concat(out).toString('utf8');
      const first = stdout.split('\n')[0];
      resolve({
        status,
        stdoutBytes: Buffer.byteLength(stdout),
        firstFrame: first ? (JSON.parse(first) as Ran['firstFrame']) : null,
        events: Buffer.concat(err).toString('utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>),
      });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(JSON.stringify(preamble) + '\n');
  });
}

describe('a child judging the frame limits of its preamble', function () {
  this.timeout(30_000);
  let home: string;
  beforeEach(() => (home = mkdtempSync(path.join(os.tmpdir(), 'custody-limits-'))));
  afterEach(() => rmSync(home, { recursive: true, force: true }));

  const REFUSED: ReadonlyArray<{ name: string; role: 'kernel' | 'executor'; limits: { max_frame_bytes: number; max_depth: number } }> = [
    { name: 'a kernel given a frame bound one past its own', role: 'kernel', limits: { max_frame_bytes: 1_048_577, max_depth: 32 } },
    { name: 'a kernel given a depth one past its own', role: 'kernel', limits: { max_frame_bytes: 1_048_576, max_depth: 33 } },
    { name: 'a kernel given a frame bound one under room for its hello', role: 'kernel', limits: { max_frame_bytes: SESSION_MIN_FRAME_BYTES - 1, max_depth: 32 } },
    { name: 'a kernel given a depth one under its hello', role: 'kernel', limits: { max_frame_bytes: 1_048_576, max_depth: SESSION_MIN_DEPTH - 1 } },
    { name: 'an executor given a frame bound one past its own', role: 'executor', limits: { max_frame_bytes: 1_048_577, max_depth: 32 } },
  ];
  for (const { name, role, limits } of REFUSED) {
    it(`${name} refuses the preamble: exit 65, nothing on stdout, preamble_refused on stderr, nothing provisioned`, async () => {
      const ran = await provisionWith(role, home, limits);
      expect(ran.status).to.equal(65);
      expect(ran.stdoutBytes).to.equal(0);
      expect(ran.events.some((e) => e.event === 'preamble_refused' && e.code === 'preamble_malformed'), JSON.stringify(ran.events)).to.equal(true);
      expect(existsSync(path.join(home, role))).to.equal(false);
    });
  }

  it('an executor given a frame bound of 12 287 sends one fatal config_invalid frame and exits 78, having made nothing', async () => {
    const ran = await provisionWith('executor', home, { max_frame_bytes: 12_287, max_depth: 32 });
    expect(ran.status).to.equal(78);
    expect(ran.firstFrame?.kind).to.equal('fatal');
    expect(ran.firstFrame?.body.code).to.equal('config_invalid');
    expect(String(ran.firstFrame?.body.message)).to.match(/12287.*12288/);
    expect(ran.events.some((e) => e.event === 'setup_refused' && e.code === 'config_invalid')).to.equal(true);
    expect(existsSync(path.join(home, 'executor'))).to.equal(false);
  });

  it('a kernel given the least bound and depth provisions and sends its hello within them', async () => {
    const ran = await provisionWith('kernel', home, { max_frame_bytes: SESSION_MIN_FRAME_BYTES, max_depth: SESSION_MIN_DEPTH });
    expect(ran.firstFrame?.kind).to.equal('hello');
    expect(ran.status).to.equal(0);
    expect(existsSync(path.join(home, 'kernel', 'kernel.pub'))).to.equal(true);
  });
});
