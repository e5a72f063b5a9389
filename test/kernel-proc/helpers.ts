// Driving a real kernel-proc in tests: a private state root per kernel, a
// clock file the test moves, a fault switch, an executor key to sign reports
// with, and read-only looks at kernel.db as an operator would take them.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { artifactDigest, decodeArtifact, signArtifact } from '../../shared/artifacts/artifact.js';
import { canonicalDigest } from '../../shared/canonical/digest.js';
import { type ChildSession, spawnChild } from '../../shared/child/spawn.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import { CustodyError } from '../../shared/errors.js';
import { readPublicKeyFile } from '../../shared/crypto/key-files.js';
import type { ReportBody } from '../../shared/protocol/artifacts.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import type { MessageKind, RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { programPath } from '../../shared/entry-points.js';
import { collectingLogger } from '../helpers/children.js';

export const TOOL = 'review-notes/append';

/** A private directory holding one kernel's state (`kernel/`), its clock file and fault markers. */
export class KernelRoot {
  readonly root: string;
  readonly dir: string;
  readonly clockFile: string;
  #offset = 0;

  constructor() {
    this.root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-kernel-test-'));
    this.dir = path.join(this.root, 'kernel');
    this.clockFile = path.join(this.root, 'clock');
    fs.writeFileSync(this.clockFile, '0\n');
  }

  /** Move the kernel's clock forward (shared/clock.ts reads this file on every batch). */
  advance(ms: number): void {
    this.#offset += ms;
    fs.writeFileSync(this.clockFile, `${this.#offset}\n`);
  }

  /** The kernel's idea of now, give or take the time a request takes. */
  now(): number {
    return Date.now() + this.#offset;
  }

  get publicKey(): string {
    return readPublicKeyFile(path.join(this.dir, 'kernel.pub'));
  }

  /** A read-only connection, as an operator's tool would open it while the kernel runs. */
  read<T>(sql: string, ...params: unknown[]): T[] {
    const db = new Database(path.join(this.dir, 'kernel.db'), { readonly: true, fileMustExist: true });
    try {
      return db.prepare(sql).all(...params) as T[];
    } finally {
      db.close();
    }
  }

  /** The sqlite3 shell, read-only, JSON output. */
  shell<T>(sql: string): T[] {
    const out = execFileSync('sqlite3', ['-readonly', '-json', path.join(this.dir, 'kernel.db'), sql], { encoding: 'utf8' });
    return out.trim() === '' ? [] : (JSON.parse(out) as T[]);
  }

  remove(): void {
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}

export interface KernelOptions {
  readonly mode?: 'provision' | 'serve';
  readonly settings?: JsonObject;
  /** Cutpoints to arm, e.g. `after_reserve_commit`; each fires once. */
  readonly faults?: readonly string[];
  /** Extra environment, e.g. CUSTODY_LOG_LEVEL. */
  readonly env?: NodeJS.ProcessEnv;
}

export class KernelProcess {
  readonly session: ChildSession;
  readonly stderr: string[];
  readonly root: KernelRoot;

  private constructor(root: KernelRoot, session: ChildSession, stderr: string[]) {
    this.root = root;
    this.session = session;
    this.stderr = stderr;
  }

  /** Start a kernel that must refuse to serve; resolves with the refusal it sent. */
  static async refusal(root: KernelRoot, options: KernelOptions = {}): Promise<CustodyError> {
    try {
      const kernel = await KernelProcess.start(root, options);
      await kernel.stop();
    } catch (error) {
      if (error instanceof CustodyError) return error;
      throw error;
    }
    throw new Error('the kernel served when it should have refused');
  }

  /** Start a kernel armed to die before its hello (a startup cutpoint); spawnChild has reaped it, and its OS-held lock with it, when it rejects. */
  static async diesBeforeHello(root: KernelRoot, options: KernelOptions): Promise<CustodyError> {
    return KernelProcess.refusal(root, options);
  }

  static async start(root: KernelRoot, options: KernelOptions = {}): Promise<KernelProcess> {
    const stderr: string[] = [];
    const { log } = collectingLogger();
    const faults = options.faults ?? [];
    const session = await spawnChild({
      argv: [process.execPath, programPath('kernel'), '--dir', root.dir],
      env: {
        ...process.env,
        CUSTODY_TEST_CLOCK_FILE: root.clockFile,
        CUSTODY_FAULT: faults.map((cutpoint) => `kernel:${cutpoint}`).join(','),
        CUSTODY_FAULT_DIR: root.root,
        ...options.env,
      },
      role: 'kernel',
      name: 'kernel',
      mode: options.mode ?? 'serve',
      pins: { kernel: null },
      settings: options.settings ?? {},
      limits: DEFAULT_FRAME_LIMITS,
      expect: null,
      maxInFlight: 256,
      helloTimeoutMs: 15_000,
      log,
      onStderrLine: (line) => {
        stderr.push(line);
        if (process.env.CUSTODY_TEST_LOG) process.stderr.write(line + '\n');
      },
    });
    return new KernelProcess(root, session, stderr);
  }

  request<K extends MessageKind>(kind: K, body: RequestOf<K>): Promise<ResultOf<K>> {
    return this.session.channel.request(kind, body);
  }

  /** End of input: the kernel finishes what it has and exits 0. */
  async stop(): Promise<void> {
    this.session.process.stdin?.end();
    await this.session.exited;
    await this.session.drained;
  }

  /** kill -9 and reap (its directory lock goes with it). */
  async kill(): Promise<void> {
    this.session.kill('SIGKILL');
    await this.reaped();
  }

  /** Wait for the process to be gone (after a fault cutpoint killed it). */
  async reaped(): Promise<void> {
    await this.session.exited;
    await this.session.drained;
  }
}

/** An executor identity for tests: a fixed key per seed byte. */
export function testExecutor(seedByte: number, id = 'exec-1', keyEpoch = 1) {
  const signer = Signer.fromSeed(new Uint8Array(32).fill(seedByte));
  return { id, keyEpoch, signer, publicKey: signer.publicKeyHex };
}
export type TestExecutor = ReturnType<typeof testExecutor>;

export function pinBody(executor: TestExecutor, tools: string[] = ['review-notes/*']): RequestOf<'executor.pin'> {
  return { executor_id: executor.id, public_key: executor.publicKey, key_epoch: executor.keyEpoch, tools };
}

export function reserveBody(requestId: string, overrides: Partial<RequestOf<'reserve'>> = {}): RequestOf<'reserve'> {
  return {
    request_id: requestId,
    subject: 'agent-1',
    tool: TOOL,
    arguments: { note: `note for ${requestId}` },
    capability_id: null,
    cost_units: 0,
    ...overrides,
  };
}

/** A report signed by `executor` for an authorization; fields overridable to forge bad ones. */
export function signReport(executor: TestExecutor, authorizationText: string, kernelKey: string, overrides: Partial<ReportBody> = {}) {
  const authorization = decodeArtifact('authorization', authorizationText, { trustedSigners: [kernelKey] }).body;
  const output = overrides.output === undefined ? { line: 'appended' } : overrides.output;
  const body: ReportBody = {
    authorization_digest: artifactDigest(authorizationText),
    operation_id: authorization.invocation.operation_id,
    executor_id: authorization.executor.id,
    key_epoch: authorization.executor.key_epoch,
    claim_id: `claim-${authorization.invocation.operation_id.slice(0, 8)}`,
    claimed_at: authorization.not_before,
    finished_at: authorization.not_before + 1,
    status: 'completed',
    output,
    output_digest: output === null ? null : canonicalDigest(output),
    realized_cost_units: null,
    ...overrides,
  };
  return signArtifact('report', body, executor.signer).text;
}

/** A grant.add body: `ttl_ms` one hour unless given. */
/** grant.list of every grant, the first page (a test's handful fits one frame). */
export const ALL_GRANTS = { live: false, limit: 10_000, after: null } as const;

export function grantBody(tool: string, overrides: Partial<RequestOf<'grant.add'>> = {}): RequestOf<'grant.add'> {
  return { tool, subject: '*', max_invocations: 100, max_cost_units: null, not_before: null, ttl_ms: 3_600_000, ...overrides };
}

export function verifyReceipt(text: string, kernelKey: string) {
  return decodeArtifact('receipt', text, { trustedSigners: [kernelKey] }).body;
}

/** The hold row of an operation, straight from the store. */
export function holdOf(root: KernelRoot, operationId: string) {
  return root.read<{ state: string; cost_units_held: number; cost_units_charged: number; settled_by: string | null }>(
    'SELECT state, cost_units_held, cost_units_charged, settled_by FROM holds WHERE operation_id = ?',
    operationId,
  )[0];
}

export { refused } from '../helpers/codes.js';
