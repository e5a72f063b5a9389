// Adapters run in their own long-lived helper process, the adapter host
// (ARCHITECTURE.md §6.2 "adapter output never reaches the frame channel"). In the
// executor, fd 1 is the frame channel; Node cannot dup2 it away, and a
// subprocess an adapter spawns with inherited stdio would write straight
// into it. In the host, fd 0 is /dev/null (no subprocess can read frames
// either) and fds 1 and 2 are pipes this class reads into the executor's
// log, line by line, bounded. Whatever an adapter or its subprocesses print,
// by whatever path, ends there. The host is in the executor's process group,
// so the supervisor's group kill reaches it, and it exits when its IPC
// channel to the executor closes.
import { type ChildProcess, fork } from 'node:child_process';
import { CustodyError, isErrorCode, limitRefusal, toCustodyError } from '../../shared/errors.js';
import { installedProgram } from '../../shared/entry-points.js';
import type { Logger } from '../../shared/log.js';
import type { AdapterDescriptor } from './contract.js';
import { withTimeout } from '../../shared/timeout.js';
import {
  HOST_ARGS_FLAG,
  type HostConfig,
  type HostExecuteResult,
  type HostMessage,
  type HostReconcileResult,
  type HostRequest,
  executeResultSchema,
  hostMessageSchema,
  reconcileResultSchema,
} from './host-protocol.js';
import { forwardLines } from '../../shared/child/output-lines.js';

const START_TIMEOUT_MS = 15_000;
const OUTPUT_LINE_MAX = 2048;

/** How a call ended: an answer, or a failure with a code (a thrown effect, a dead host: indeterminate). */
export type HostAnswer = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: CustodyError };

type HostRequestBody = HostRequest extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

export class AdapterHost {
  readonly #config: HostConfig;
  readonly #log: Logger;
  readonly #pending = new Map<number, (answer: HostAnswer) => void>();
  #child: ChildProcess | null = null;
  #starting: Promise<ChildProcess> | null = null;
  #descriptors = new Map<string, AdapterDescriptor>();
  #nextId = 0;
  #closing = false;
  #generation = 0;

  private constructor(config: HostConfig, log: Logger) {
    this.#config = config;
    this.#log = log;
  }

  /** Start the host and load every adapter; refuses (config_invalid) when a module cannot be loaded. */
  static async start(config: HostConfig, log: Logger): Promise<AdapterHost> {
    const host = new AdapterHost(config, log);
    await host.#ensure();
    return host;
  }

  get descriptors(): ReadonlyMap<string, AdapterDescriptor> {
    return this.#descriptors;
  }

  /** Changes whenever a host process becomes ready or the running one exits: an answer is tied to the host that gave it. */
  get generation(): number {
    return this.#generation;
  }

  /** Send one call; the answer comes whenever the host gives it, or when the host dies. */
  call(body: HostRequestBody): { readonly id: number; readonly answer: Promise<HostAnswer> } {
    const id = ++this.#nextId;
    const answer = new Promise<HostAnswer>((resolve) => this.#pending.set(id, resolve));
    void this.#ensure().then(
      (child) => this.#send(child, { ...body, id }),
      (error: unknown) => this.#settle(id, { ok: false, error: hostFailure(`adapter host unavailable: ${(error as Error).message}`) }),
    );
    return { id, answer };
  }

  cancel(id: number): void {
    if (this.#child && this.#pending.has(id)) this.#send(this.#child, { type: 'cancel', id });
  }

  static executeResult(value: unknown): HostExecuteResult {
    const parsed = executeResultSchema.safeParse(value);
    if (!parsed.success) throw hostFailure('adapter returned something other than applied, not_applied or cancelled from execute');
    return parsed.data;
  }

  static reconcileResult(value: unknown): HostReconcileResult {
    const parsed = reconcileResultSchema.safeParse(value);
    if (!parsed.success) throw hostFailure('adapter returned something other than applied, not_applied or indeterminate from reconcile');
    return parsed.data;
  }

  async close(): Promise<void> {
    this.#closing = true;
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    if (child.connected) child.disconnect();
    await withTimeout(exited, 2000, () => {
      child.kill('SIGKILL');
      return exited;
    });
  }

  #ensure(): Promise<ChildProcess> {
    if (this.#child) return Promise.resolve(this.#child);
    if (this.#closing) return Promise.reject(new CustodyError('shutting_down', 'the executor is closing its adapter host'));
    this.#starting ??= this.#spawn().finally(() => (this.#starting = null));
    return this.#starting;
  }

  #spawn(): Promise<ChildProcess> {
    let program: string;
    try {
      program = installedProgram('adapter-host');
    } catch (error) {
      return Promise.reject(toCustodyError(error));
    }
    const child = fork(program, [HOST_ARGS_FLAG, JSON.stringify(this.#config)], {
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'json',
      execArgv: [],
    });
    this.#forwardOutput(child);
    return new Promise<ChildProcess>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new CustodyError('config_invalid', `adapter host sent no ready within ${START_TIMEOUT_MS} ms`));
      }, START_TIMEOUT_MS);
      child.on('message', (raw: unknown) => {
        const parsed = hostMessageSchema.safeParse(raw);
        if (!parsed.success) {
          this.#log.error('adapter_host_message_refused', { message: 'the adapter host sent a message outside its protocol' });
          return;
        }
        const message = parsed.data;
        if (message.type === 'ready') {
          clearTimeout(timer);
          this.#descriptors = new Map(message.adapters.map((descriptor) => [descriptor.tool, descriptor]));
          this.#child = child;
          this.#generation += 1;
          this.#log.info('adapter_host_ready', { host_pid: child.pid, tools: [...this.#descriptors.keys()] });
          resolve(child);
        } else if (message.type === 'load_failed') {
          clearTimeout(timer);
          reject(new CustodyError('config_invalid', message.message));
        } else {
          this.#onMessage(message);
        }
      });
      child.once('error', (error: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(hostStartError(error));
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        // Killed before it was ready (SIGABRT when Node cannot create its threads, SIGKILL from the OOM killer): the
        // machine, not the adapters' configuration; a start refused this way counts toward the executor's restarts.
        reject(
          signal === null
            ? new CustodyError('config_invalid', `adapter host exited (code ${code}) before it was ready`)
            : new CustodyError('peer_exited', `adapter host was killed by ${signal} before it was ready: it crashed while starting (out of memory, or of processes or threads?)`),
        );
        this.#onExit(child, code, signal);
      });
    });
  }

  #onMessage(message: Exclude<HostMessage, { type: 'ready' | 'load_failed' }>): void {
    switch (message.type) {
      case 'log':
        this.#log[message.level](message.event, message.fields);
        return;
      case 'result':
        this.#settle(message.id, { ok: true, value: message.value });
        return;
      case 'failure': {
        const code = isErrorCode(message.code) ? message.code : 'indeterminate';
        this.#settle(message.id, { ok: false, error: new CustodyError(code, message.message) });
        return;
      }
    }
  }

  // A host that dies takes its running calls with it: each of them may or
  // may not have had its effect, so each is answered indeterminate, and the
  // next call starts a fresh host.
  #onExit(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.#child === child) {
      this.#child = null;
      this.#generation += 1;
    }
    if (!this.#closing) this.#log.warn('adapter_host_exited', { host_pid: child.pid, code, signal, running: this.#pending.size });
    for (const id of [...this.#pending.keys()]) {
      this.#settle(id, { ok: false, error: hostFailure(`adapter host exited (code ${code}, signal ${signal}) during the call`) });
    }
  }

  #settle(id: number, answer: HostAnswer): void {
    const resolve = this.#pending.get(id);
    if (!resolve) return;
    this.#pending.delete(id);
    resolve(answer);
  }

  #send(child: ChildProcess, request: HostRequest): void {
    try {
      child.send(request);
    } catch (error) {
      this.#settle(request.id, { ok: false, error: hostFailure(`cannot reach the adapter host: ${(error as Error).message}`) });
    }
  }

  #forwardOutput(child: ChildProcess): void {
    for (const stream of ['stdout', 'stderr'] as const) {
      const source = child[stream];
      if (!source) continue;
      forwardLines(source, OUTPUT_LINE_MAX, (line, droppedBytes) => {
        this.#log.info('adapter_output', { host_pid: child.pid, stream, line, ...(droppedBytes > 0 ? { dropped_bytes: droppedBytes } : {}) });
      });
    }
  }
}

/** Why the host could not be forked: the machine's limits (retried uncounted, shared/errors.ts limitRefusal) or anything else. */
export function hostStartError(error: NodeJS.ErrnoException): CustodyError {
  return limitRefusal('adapter host cannot start', error) ?? new CustodyError('config_invalid', `adapter host cannot start: ${error.message}`, { cause: error });
}

function hostFailure(message: string): CustodyError {
  return new CustodyError('indeterminate', message);
}
