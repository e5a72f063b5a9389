// npm run bench:wire — in one run: raw JSON lines over a child pipe (the
// baseline) against custody's authenticated frames, at 200 B and 2 KiB
// bodies, one way and as round trips with the child answering, plus
// Ed25519 sign/verify rates per backend. Prints a table and
// writes bench-results/wire.json. Not a test: nothing here asserts a speed.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PREAMBLE_TAG } from '../../shared/protocol/preamble.js';
import { MESSAGES } from '../../shared/protocol/messages.js';
import { DEFAULT_FRAME_LIMITS, FrameReader } from '../../shared/wire/frame-reader.js';
import { LineSplitter } from '../../shared/wire/line-splitter.js';
import { encodePreamble } from '../../shared/wire/preamble.js';
import { SessionEndpoint } from '../../shared/wire/session.js';
import { createSessionSecrets } from '../../shared/wire/session-keys.js';
import { measureEd25519 } from './ed25519.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const RESULTS_DIR = path.resolve(HERE, '..', '..', '..', 'bench-results');

export interface WireRow {
  body_bytes: number;
  mode: 'raw' | 'auth';
  frames: number;
  frame_bytes: number;
  seconds: number;
  frames_per_s: number;
  mb_per_s: number;
}

function bodyOf(size: number): Record<string, unknown> {
  const skeleton = JSON.stringify({ p: '' }).length;
  return { p: randomBytes(size).toString('base64').slice(0, size - skeleton) };
}

/** The preamble a sink in `auth` mode reads first: the session's id and key. */
function preambleOf(secrets: ReturnType<typeof createSessionSecrets>): Buffer {
  return encodePreamble({
    custody: PREAMBLE_TAG, sid: secrets.sid, key: secrets.key.toString('hex'), role: 'kernel', name: 'bench',
    challenge: randomBytes(32).toString('hex'), mode: 'serve', pins: { kernel: null },
    limits: { max_frame_bytes: DEFAULT_FRAME_LIMITS.maxFrameBytes, max_depth: DEFAULT_FRAME_LIMITS.maxDepth }, settings: {},
  });
}

async function runOnce(mode: 'raw' | 'auth', bodyBytes: number, frames: number): Promise<WireRow> {
  const child = spawn(process.execPath, [path.join(HERE, 'wire-sink.js'), mode, String(frames)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const body = bodyOf(bodyBytes);
  const secrets = createSessionSecrets();
  const endpoint = new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: DEFAULT_FRAME_LIMITS });
  const finished = new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`sink exited ${code}`))));
  });
  if (mode === 'auth') {
    child.stdin.write(preambleOf(secrets));
  }
  let frameBytes = 0;
  const started = process.hrtime.bigint();
  for (let i = 0; i < frames; i++) {
    const line = mode === 'raw'
      ? Buffer.from(JSON.stringify({ v: 1, seq: i, kind: 'echo', id: `q${i}`, body }) + '\n')
      : endpoint.seal('echo', `q${i}`, body);
    frameBytes = line.length;
    if (!child.stdin.write(line)) await new Promise((resolve) => child.stdin.once('drain', resolve));
  }
  await finished;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  child.kill();
  return {
    body_bytes: bodyBytes,
    mode,
    frames,
    frame_bytes: frameBytes,
    seconds,
    frames_per_s: frames / seconds,
    mb_per_s: (frames * frameBytes) / seconds / 1e6,
  };
}

export interface RoundTripRow {
  body_bytes: number;
  mode: 'raw' | 'auth';
  round_trips: number;
  p50_us: number;
  p99_us: number;
  per_s: number;
}

/**
 * Request and answer with a child over its pipes, one at a time: a frame
 * sent, the child reads it and answers, the answer read (raw: JSON lines
 * both ways; auth: sealed, authenticated and checked both ways, as a
 * channel does). What one hop of a governed operation costs when nothing
 * else is in flight: the child sleeps between frames, as the processes of
 * a service do at one in flight.
 */
async function roundTrips(mode: 'raw' | 'auth', bodyBytes: number, count: number): Promise<RoundTripRow> {
  const child = spawn(process.execPath, [path.join(HERE, 'wire-sink.js'), mode, 'echo'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const body = bodyOf(bodyBytes);
  const secrets = createSessionSecrets();
  const endpoint = new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: DEFAULT_FRAME_LIMITS });
  if (mode === 'auth') child.stdin.write(preambleOf(secrets));
  const splitter = new LineSplitter(DEFAULT_FRAME_LIMITS.maxFrameBytes);
  const reader = new FrameReader(DEFAULT_FRAME_LIMITS, (line) => endpoint.open(line));
  let answered: (() => void) | null = null;
  child.stdout.on('data', (chunk: Buffer) => {
    let answers = 0;
    if (mode === 'raw') {
      splitter.push(chunk, (line) => {
        JSON.parse(line.toString('utf8'));
        answers++;
      });
    } else {
      const { frames, error } = reader.push(chunk);
      if (error) throw error;
      for (const frame of frames) MESSAGES.echo.result.parse(frame.body);
      answers = frames.length;
    }
    if (answers > 0) answered?.();
  });
  const one = (i: number) =>
    new Promise<void>((resolve) => {
      answered = resolve;
      child.stdin.write(mode === 'raw' ? Buffer.from(JSON.stringify({ v: 1, seq: i, kind: 'echo', id: `q${i}`, body }) + '\n') : endpoint.seal('echo', `q${i}`, body));
    });
  const warmUp = Math.min(200, count);
  for (let i = 0; i < warmUp; i++) await one(i);
  const times: number[] = [];
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    const sent = performance.now();
    await one(warmUp + i);
    times.push((performance.now() - sent) * 1000);
  }
  const seconds = (performance.now() - started) / 1000;
  child.kill();
  times.sort((a, b) => a - b);
  const at = (p: number) => times[Math.min(times.length - 1, Math.floor((p / 100) * times.length))]!;
  return { body_bytes: bodyBytes, mode, round_trips: count, p50_us: at(50), p99_us: at(99), per_s: count / seconds };
}

export async function measureWire(scale = 1) {
  const rows: WireRow[] = [];
  for (const [bodyBytes, frames] of [[200, 100_000], [2048, 30_000]] as const) {
    const count = Math.round(frames * scale);
    // warm-up, then alternate to spread machine noise over both modes
    await runOnce('raw', bodyBytes, Math.round(count / 10));
    const raw = [await runOnce('raw', bodyBytes, count), await runOnce('auth', bodyBytes, count), await runOnce('raw', bodyBytes, count), await runOnce('auth', bodyBytes, count)];
    const best = (mode: 'raw' | 'auth') => raw.filter((r) => r.mode === mode).reduce((a, b) => (a.frames_per_s > b.frames_per_s ? a : b));
    rows.push(best('raw'), best('auth'));
  }
  const trips = Math.max(100, Math.round(2000 * scale));
  const round_trips = [await roundTrips('raw', 200, trips), await roundTrips('auth', 200, trips)];
  const ratios = [200, 2048].map((bodyBytes) => {
    const raw = rows.find((r) => r.body_bytes === bodyBytes && r.mode === 'raw')!;
    const auth = rows.find((r) => r.body_bytes === bodyBytes && r.mode === 'auth')!;
    return { body_bytes: bodyBytes, auth_over_raw: auth.frames_per_s / raw.frames_per_s };
  });
  return { rows, ratios, round_trips };
}

export function printWire(result: Awaited<ReturnType<typeof measureWire>>): void {
  const lines = ['body    mode   frames/s     MB/s   frame bytes'];
  for (const r of result.rows) {
    lines.push(`${String(r.body_bytes).padEnd(7)} ${r.mode.padEnd(5)} ${r.frames_per_s.toFixed(0).padStart(9)} ${r.mb_per_s.toFixed(1).padStart(8)}   ${r.frame_bytes}`);
  }
  for (const q of result.ratios) lines.push(`ratio authenticated/raw at ${q.body_bytes} B: ${q.auth_over_raw.toFixed(2)}`);
  lines.push('frame round trip with a child, one at a time (request and answer over its pipes)');
  for (const r of result.round_trips) {
    lines.push(`  ${String(r.body_bytes).padEnd(5)} ${r.mode.padEnd(5)} p50 ${r.p50_us.toFixed(0).padStart(5)} µs, p99 ${r.p99_us.toFixed(0).padStart(5)} µs, ${r.per_s.toFixed(0).padStart(6)} round trips/s`);
  }
  process.stdout.write(lines.join('\n') + '\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const wire = await measureWire();
  printWire(wire);
  const ed25519 = measureEd25519(1500);
  process.stdout.write('\nEd25519 per second\n');
  for (const row of ed25519) process.stdout.write(`${row.backend.padEnd(6)} ${row.op.padEnd(7)} ${row.perSecond.toFixed(0).padStart(9)}\n`);
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, 'wire.json');
  writeFileSync(file, JSON.stringify({ measured_at: new Date().toISOString(), node: process.version, wire, ed25519 }, null, 2) + '\n');
  process.stdout.write(`\nwrote ${file}\n`);
}
