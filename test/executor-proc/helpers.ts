// Shared pieces of the executor-proc tests: a private state directory, a
// real executor process over real pipes, authorizations signed by a test
// kernel key, and readers for the journal and the ledger (through the
// sqlite3 shell, as an operator reads them).
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { signArtifact } from '../../shared/artifacts/artifact.js';
import { type ChildSession, spawnChild } from '../../shared/child/spawn.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import type { Invocation } from '../../shared/protocol/artifacts.js';
import { operationIdFor, parametersDigest } from '../../shared/protocol/binding.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { programPath } from '../../shared/entry-points.js';
import { collectingLogger, distPath } from '../helpers/children.js';

export const KERNEL = Signer.fromSeed(Buffer.alloc(32, 7));
export const OTHER_KERNEL = Signer.fromSeed(Buffer.alloc(32, 9));
export const EXECUTOR_MAIN = programPath('executor');
export const FIXTURE_ADAPTERS = distPath('test', 'fixtures', 'executor-adapters.js');
export const NOTE_TOOL = 'review-notes/append';

export interface Home {
  readonly root: string;
  readonly dir: string;
  readonly resources: string;
  readonly faults: string;
  readonly clockFile: string;
  readonly journal: string;
  readonly ledgerFile: string;
}

export function makeHome(name = 'alpha'): Home {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-executor-test-'));
  const faults = path.join(root, 'faults');
  fs.mkdirSync(faults, { mode: 0o700 });
  const clockFile = path.join(root, 'clock-offset');
  fs.writeFileSync(clockFile, '0\n');
  const dir = path.join(root, 'executors', name);
  const resources = path.join(root, 'resources');
  return { root, dir, resources, faults, clockFile, journal: path.join(resources, 'review-notes.jsonl'), ledgerFile: path.join(dir, 'ledger.db') };
}

export function removeHome(home: Home): void {
  fs.rmSync(home.root, { recursive: true, force: true });
}

/** Move this home's executor clock by `offsetMs` from real time (negative steps it back). */
export function setClockOffset(home: Home, offsetMs: number): void {
  fs.writeFileSync(home.clockFile, `${offsetMs}\n`);
}

export interface StartOptions {
  readonly mode?: 'provision' | 'serve';
  readonly name?: string;
  readonly settings?: JsonObject;
  readonly kernelPin?: string;
  /** CUSTODY_FAULT entries without the role, e.g. ['after_claim']. */
  readonly faults?: readonly string[];
  readonly adapters?: readonly string[];
  readonly dir?: string;
  /** The session's frame bound (preamble limits.max_frame_bytes); default 1 MiB. */
  readonly maxFrameBytes?: number;
  /** The session's nesting bound (preamble limits.max_depth); default 32. */
  readonly maxDepth?: number;
  /** The supervisor's witness of the ledger head (docs/ROLLBACK.md); default: acknowledged at once. */
  readonly onHead?: (head: number) => void | Promise<void>;
}

export type Executor = ChildSession & { readonly stderr: string[]; readonly identity: { id: string; public_key: string; key_epoch: number } };

export async function startExecutor(home: Home, options: StartOptions = {}): Promise<Executor> {
  const stderr: string[] = [];
  const { log } = collectingLogger();
  const argv = [process.execPath, EXECUTOR_MAIN, '--dir', options.dir ?? home.dir, '--resources', home.resources];
  for (const adapter of options.adapters ?? [FIXTURE_ADAPTERS]) argv.push('--adapter', adapter);
  const session = await spawnChild({
    argv,
    env: {
      ...process.env,
      CUSTODY_TEST_CLOCK_FILE: home.clockFile,
      CUSTODY_FAULT_DIR: home.faults,
      CUSTODY_FAULT: (options.faults ?? []).map((fault) => `executor:${fault}`).join(','),
    },
    role: 'executor',
    name: options.name ?? 'alpha',
    mode: options.mode ?? 'serve',
    pins: { kernel: options.kernelPin ?? KERNEL.publicKeyHex },
    settings: options.settings ?? {},
    limits: { maxFrameBytes: options.maxFrameBytes ?? DEFAULT_FRAME_LIMITS.maxFrameBytes, maxDepth: options.maxDepth ?? DEFAULT_FRAME_LIMITS.maxDepth },
    expect: null,
    maxInFlight: 32,
    helloTimeoutMs: 20_000,
    ...(options.onHead ? { onHead: options.onHead } : {}),
    log,
    onStderrLine: (line) => {
      stderr.push(line);
      if (process.env.CUSTODY_TEST_LOG) process.stderr.write(`[executor] ${line}\n`);
    },
  });
  const identity = { id: session.hello.id, public_key: session.hello.public_key, key_epoch: session.hello.key_epoch };
  return Object.assign(session, { stderr, identity });
}

/** Close stdin (the supervisor is gone) and wait for the exit. */
export async function stopExecutor(executor: Executor): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  executor.process.stdin?.end();
  return executor.exited;
}

/** After a kill -9: once the process is gone, its OS-held directory lock is too, and the next one starts at once. */
export async function reapKilled(_home: Home, executor: Executor): Promise<void> {
  await executor.exited;
}

export interface Authorization {
  readonly text: string;
  readonly expected: Invocation;
  readonly args: JsonObject;
  readonly operationId: string;
}

export interface AuthorizeOptions {
  readonly tool?: string;
  readonly args?: JsonObject;
  readonly notBefore?: number;
  readonly expiresAt?: number;
  readonly signer?: Signer;
  readonly executor?: { id: string; public_key: string; key_epoch: number };
}

export function authorize(executor: Executor | { identity: Executor['identity'] }, options: AuthorizeOptions = {}): Authorization {
  const now = Date.now();
  const requestId = `req-${randomBytes(8).toString('hex')}`;
  const operationId = operationIdFor(requestId);
  const args = options.args ?? { note: `note for ${requestId}` };
  const expected: Invocation = {
    operation_id: operationId,
    request_id: requestId,
    request_binding_hash: randomBytes(32).toString('hex'),
    capability_id: 'grant-1',
    capability_digest: randomBytes(32).toString('hex'),
    tool: options.tool ?? NOTE_TOOL,
    parameters_digest: parametersDigest(args),
  };
  const artifact = signArtifact(
    'authorization',
    {
      executor: options.executor ?? executor.identity,
      invocation: expected,
      committed: { nonce_id: `nonce-${requestId}`, budget_hold_id: `hold-${requestId}` },
      not_before: options.notBefore ?? now - 1_000,
      expires_at: options.expiresAt ?? now + 120_000,
      issued_at: now - 1_000,
    },
    options.signer ?? KERNEL,
  );
  return { text: artifact.text, expected, args, operationId };
}

export function executeBody(auth: Authorization, extra: { drop_reply?: boolean; args?: JsonObject } = {}) {
  return { authorization: auth.text, expected: auth.expected, arguments: extra.args ?? auth.args, drop_reply: extra.drop_reply ?? false };
}

export interface JournalEntry {
  readonly operation_id?: string;
  readonly note?: string;
  readonly sha256?: string;
  readonly fence?: string;
}

export function journalEntries(home: Home): JournalEntry[] {
  if (!fs.existsSync(home.journal)) return [];
  return fs
    .readFileSync(home.journal, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as JournalEntry);
}

export function notesFor(home: Home, operationId: string): JournalEntry[] {
  return journalEntries(home).filter((entry) => entry.operation_id === operationId);
}

export function fencesFor(home: Home, operationId: string): JournalEntry[] {
  return journalEntries(home).filter((entry) => entry.fence === operationId);
}

/** Run SQL with the sqlite3 shell, as an operator would; JSON rows, or the shell's error. */
export function sqlite(file: string, sql: string): { rows: Array<Record<string, unknown>>; error: string | null } {
  try {
    const out = execFileSync('/usr/bin/sqlite3', ['-json', file, sql], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return { rows: out.trim() === '' ? [] : (JSON.parse(out) as Array<Record<string, unknown>>), error: null };
  } catch (error) {
    return { rows: [], error: String((error as { stderr?: unknown }).stderr ?? error) };
  }
}

/** Wait for a pause point (fault-pause.ts) to be reached, then return its release function. */
export async function reachedPause(home: Home, cutpoint: string, timeoutMs = 10_000): Promise<() => void> {
  const reached = path.join(home.faults, `executor.${cutpoint}.reached`);
  const deadline = Date.now() + timeoutMs;
  while (!fs.existsSync(reached)) {
    if (Date.now() > deadline) throw new Error(`pause point ${cutpoint} not reached within ${timeoutMs} ms`);
    await sleep(10);
  }
  return () => fs.writeFileSync(path.join(home.faults, `executor.${cutpoint}.release`), '');
}

/** Provision an executor in `home`, then leave it (closed stdin, exit 0), ready to serve. */
export async function provisioned(home: Home, options: StartOptions = {}): Promise<Executor['identity']> {
  const executor = await startExecutor(home, { ...options, mode: 'provision' });
  const exit = await stopExecutor(executor);
  if (exit.code !== 0) throw new Error(`provisioning exited ${exit.code}: ${executor.stderr.join('\n')}`);
  return executor.identity;
}
