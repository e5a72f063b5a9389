// Starting a child process with a fresh session: spawn it in its own process
// group, write the preamble, open the channel, and accept it only after its
// hello proves the expected identity. Used by the supervisor and by tests
// that drive the real kernel and executor entry points.
import { type ChildProcess, type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { CustodyError, limitRefusal } from '../errors.js';
import { type Logger, errorFields } from '../log.js';
import { stderrSink } from '../log-sink.js';
import type { ChildRole, JsonObject } from '../protocol/common.js';
import type { HelloBody } from '../protocol/messages.js';
import { PREAMBLE_TAG } from '../protocol/preamble.js';
import { ClientChannel } from '../wire/client.js';
import type { FrameLimits } from '../wire/frame-reader.js';
import { type PinnedIdentity, verifyHello } from '../wire/hello.js';
import { encodePreamble } from '../wire/preamble.js';
import { SessionEndpoint } from '../wire/session.js';
import { withTimeout } from '../timeout.js';
import { MIGRATING_EVENT } from '../store/migrations.js';
import { type SessionSecrets, createSessionSecrets } from '../wire/session-keys.js';
import { forwardLines } from './output-lines.js';
import { wellFormed } from '../text/cut.js';

export interface ChildExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface SpawnChildOptions {
  /** The command and its arguments; any command that speaks the wire on stdio. */
  readonly argv: readonly string[];
  readonly cwd?: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly role: ChildRole;
  readonly name: string;
  readonly mode: 'serve' | 'provision';
  readonly pins: { readonly kernel: string | null };
  readonly settings: JsonObject;
  readonly limits: FrameLimits;
  /** The pinned identity the hello must prove; null accepts any valid proof (provisioning). */
  readonly expect: PinnedIdentity | null;
  readonly maxInFlight: number;
  /** How long the child may take to send its hello. */
  readonly helloTimeoutMs: number;
  /**
   * How long it may take once it announced a store migration (the
   * `store_migrating` line on stderr, docs/PROTOCOL.md §5), counted from
   * that line. Default: no more than the hello timeout.
   */
  readonly migrateTimeoutMs?: number;
  readonly log: Logger;
  /** Abandons the start: before the hello, the process group is killed and awaited and the spawn rejects with shutting_down. */
  readonly signal?: AbortSignal;
  /** Each line the child writes on stderr (its JSON log). Default: forwarded to this process's stderr. */
  readonly onStderrLine?: (line: string) => void;
  /** The channel stopped (poisoned or closed), first reason. */
  readonly onChannelEnd?: (reason: CustodyError, state: string) => void;
  /**
   * Record a head the child announced (docs/ROLLBACK.md); called before the
   * answers that follow it are delivered. For an executor, once the promise
   * resolves (the head is durable) it is told `head.witnessed`. Default:
   * nothing is recorded and the head is acknowledged at once (tests,
   * provisioning).
   */
  readonly onHead?: (head: number) => void | Promise<void>;
  /**
   * The process exists (its pid), before its hello: a supervisor records it
   * so that a successor started after a kill -9 can kill a child that was
   * still starting (a store migration, a stopped process).
   */
  readonly onSpawned?: (pid: number) => void;
}

export interface ChildSession {
  readonly process: ChildProcess;
  readonly pid: number;
  readonly sid: string;
  readonly channel: ClientChannel;
  readonly hello: HelloBody;
  /** Resolves when the process has exited and been reaped. */
  readonly exited: Promise<ChildExit>;
  /** Resolves once the process has exited and its stdio is fully read (its last log lines delivered). */
  readonly drained: Promise<void>;
  /** Signal the child's whole process group (adapters' subprocesses included). */
  kill(signal?: NodeJS.Signals): void;
}

/**
 * Signal a process group, ignoring a group that is already gone. EPERM (no
 * member left that this process may signal: a command an adapter ran as
 * another user) is not thrown either: the caller's wait for the group to
 * empty sees the survivor and says so (process_group_survived); thrown, it
 * ended the supervisor as an unhandled rejection.
 */
export function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ESRCH' && code !== 'EPERM') throw error;
  }
}

/**
 * Start a child with a fresh session and accept it once its hello proves the
 * expected identity (ARCHITECTURE.md §4.2); refused or silent, it is killed
 * and awaited before the refusal is thrown.
 */
export async function spawnChild(options: SpawnChildOptions): Promise<ChildSession> {
  const [command, ...args] = options.argv;
  if (!command) throw new CustodyError('config_invalid', `${options.name}: empty argv`);
  const secrets = createSessionSecrets();
  const challenge = randomBytes(32).toString('hex');
  const log = options.log.child({ child: options.name, sid: secrets.sid });
  const started = startProcess(command, args, options);
  // Out of descriptors, Node gives the child no pipes and only an 'error' on the next tick: that is the refusal.
  if (!started.piped) await started.spawnFailure;
  if (started.pid !== undefined && options.onSpawned) {
    // Only a record for a successor: a failure to keep it (supervisor.db locked from a shell) must not leave this process unowned.
    try {
      options.onSpawned(started.pid);
    } catch (error) {
      log.warn('child_pid_not_recorded', { child_pid: started.pid, ...errorFields(error) });
    }
  }
  const migrating = relayStderr(started.child, options, log);
  const channel = openChannel(started.child, secrets, options, log);
  started.child.stdin.write(preambleFor(secrets, challenge, options));
  channel.start();
  return awaitHello(started, channel, { sid: secrets.sid, challenge, migrating }, options, log);
}

/** Rejects (shutting_down) once `options.signal` aborts; never settles without one. */
function abandoned(options: SpawnChildOptions): Promise<never> {
  const { signal } = options;
  if (!signal) return new Promise<never>(() => undefined);
  const refusal = new Promise<never>((_, reject) => {
    const abandon = () => reject(new CustodyError('shutting_down', `${options.name}: its start was abandoned before its hello; the service is stopping`));
    if (signal.aborted) abandon();
    else signal.addEventListener('abort', abandon, { once: true });
  });
  refusal.catch(() => undefined);
  return refusal;
}

/** What a child said of the store migration it runs before its hello. */
interface MigrationNotice {
  readonly store?: unknown;
  readonly from?: unknown;
  readonly to?: unknown;
}

/** The notice in one stderr line, or null: a JSON object whose event is store_migrating (shared/store/migrations.ts). */
function migrationNotice(line: string): MigrationNotice | null {
  if (!line.includes(MIGRATING_EVENT)) return null;
  try {
    const record: unknown = JSON.parse(line);
    return typeof record === 'object' && record !== null && (record as { event?: unknown }).event === MIGRATING_EVENT ? record : null;
  } catch {
    return null;
  }
}

/** A spawned process, before its hello. */
interface StartedProcess {
  readonly child: ChildProcessWithoutNullStreams;
  readonly pid: number | undefined;
  readonly exited: Promise<ChildExit>;
  readonly drained: Promise<void>;
  /** Rejects when the command cannot be started at all. */
  readonly spawnFailure: Promise<never>;
  /** Whether the child got its pipes: without descriptors for them, Node leaves its stdio unset. */
  readonly piped: boolean;
  readonly kill: (signal?: NodeJS.Signals) => void;
}

/** Spawn the command as the leader of its own process group (ARCHITECTURE.md §7 "children"). */
function startProcess(command: string, args: readonly string[], options: SpawnChildOptions): StartedProcess {
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
  });
  // A command that could not be started (ENOENT, EACCES, EAGAIN) has no pid
  // and never emits 'exit', only 'error': there is nothing to reap, and the
  // refusal must not wait for an exit that never comes.
  const exited = new Promise<ChildExit>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', () => {
      if (child.pid === undefined) resolve({ code: null, signal: null });
    });
  });
  const drained = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const spawnFailure = new Promise<never>((_, reject) => {
    child.once('error', (error: NodeJS.ErrnoException) => reject(spawnError(options.name, command, error)));
  });
  spawnFailure.catch(() => undefined);
  const pid = child.pid;
  const kill = (signal: NodeJS.Signals = 'SIGKILL') => {
    if (pid !== undefined && child.exitCode === null && child.signalCode === null) killGroup(pid, signal);
  };
  return { child, pid, exited, drained, spawnFailure, piped: Boolean((child as ChildProcess).stdin), kill };
}

/**
 * Why a command could not be started: a limit outside the child (retried,
 * uncounted), a command that is not there or not executable (its argv in
 * custody.json), or anything else.
 */
export function spawnError(name: string, command: string, error: NodeJS.ErrnoException): CustodyError {
  const cannot = `${name}: cannot start ${command}`;
  const limited = limitRefusal(cannot, error);
  if (limited) return limited;
  if (error.code === 'ENOENT' || error.code === 'EACCES') {
    const why = `${error.code === 'ENOENT' ? 'no such file' : 'permission denied'} (${error.code})`;
    // Without an argv in custody.json a child runs on the very node that runs custody.
    const check =
      command === process.execPath
        ? `it is the node that runs custody, removed or replaced since the service started (a Node upgrade?): restart the service`
        : 'check the command in its argv in custody.json (kernel.argv or executors[].argv)';
    return new CustodyError('config_invalid', `${cannot}: ${why}; ${check}`, { cause: error });
  }
  return new CustodyError('peer_exited', `${cannot}: ${error.message}`, { cause: error });
}

/** A child's stderr line is kept up to this many bytes; the rest is counted (`dropped_bytes`), never buffered. */
export const CHILD_LINE_MAX_BYTES = 64 * 1024;

/**
 * A child's stderr line as a line of the supervisor's own log: a JSON log
 * line (docs/PROTOCOL.md §11.7) as it is; anything else (a crash trace, an
 * ssh warning, text glued to a line by a wrapper's partial write, a line cut
 * at its bound) wrapped as `child_stderr`, so every line of the log parses.
 */
export function asLogLine(text: string, droppedBytes: number, child: string): string {
  // A line ended with CRLF (as readline took it before) is the same line.
  const line = text.endsWith('\r') ? text.slice(0, -1) : text;
  if (droppedBytes === 0 && line.startsWith('{') && line.endsWith('}')) return line;
  return JSON.stringify({ ts: new Date().toISOString(), level: 'warn', event: 'child_stderr', child, line: wellFormed(line), ...(droppedBytes > 0 ? { dropped_bytes: droppedBytes } : {}) });
}

/**
 * The child's stderr is its JSON log, one line at a time; stdin errors are
 * only the echo of an early exit. Resolves with the first store migration
 * notice, if the child writes one.
 */
function relayStderr(child: ChildProcessWithoutNullStreams, options: SpawnChildOptions, log: Logger): Promise<MigrationNotice> {
  const onLine = options.onStderrLine ?? ((line: string) => stderrSink().write(line + '\n'));
  let noticed: (notice: MigrationNotice) => void = () => undefined;
  const migrating = new Promise<MigrationNotice>((resolve) => (noticed = resolve));
  forwardLines(child.stderr, CHILD_LINE_MAX_BYTES, (line, droppedBytes) => {
    const notice = migrationNotice(line);
    if (notice) noticed(notice);
    onLine(asLogLine(line, droppedBytes, options.name));
  });
  // A child that dies early closes its stdin; the write error is the exit's echo.
  child.stdin.on('error', (error) => log.debug('child_stdin_error', errorFields(error)));
  return migrating;
}

/** The supervisor's end of the session; an executor's heads are acknowledged once recorded (docs/ROLLBACK.md). */
function openChannel(child: ChildProcessWithoutNullStreams, secrets: SessionSecrets, options: SpawnChildOptions, log: Logger): ClientChannel {
  const acks = new HeadAcknowledgements(log);
  const endpoint = new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: options.role, limits: options.limits });
  const channel = new ClientChannel({
    input: child.stdout,
    output: child.stdin,
    endpoint,
    log,
    peerRole: options.role,
    maxInFlight: options.maxInFlight,
    ...(options.onChannelEnd ? { onTerminated: options.onChannelEnd } : {}),
    onHead: (head) => {
      const recorded = options.onHead?.(head);
      if (options.role !== 'executor') return;
      // The executor waits for this before it runs an effect; a failed record leaves it waiting, never acknowledged.
      void Promise.resolve(recorded).then(
        () => acks.acknowledge(head),
        (error: unknown) => log.warn('head_not_witnessed', { head, ...errorFields(error) }),
      );
    },
  });
  acks.attach(channel);
  return channel;
}

/** One head.witnessed per turn, with the highest head recorded: the heads of one group commit share one answer. */
class HeadAcknowledgements {
  readonly #log: Logger;
  #channel: ClientChannel | null = null;
  #recorded = -1;
  #acknowledged = -1;
  #scheduled = false;

  constructor(log: Logger) {
    this.#log = log;
  }

  attach(channel: ClientChannel): void {
    this.#channel = channel;
  }

  acknowledge(head: number): void {
    this.#recorded = Math.max(this.#recorded, head);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      if (this.#recorded <= this.#acknowledged || !this.#channel) return;
      const recorded = (this.#acknowledged = this.#recorded);
      this.#channel.request('head.witnessed', { head: recorded }).catch((error: unknown) => this.#log.warn('head_not_witnessed', { head: recorded, ...errorFields(error) }));
    });
  }
}

/** The preamble (docs/PROTOCOL.md §4.1, settings §11.4): the session's secrets, the pins, the frame bounds, the role's settings. */
function preambleFor(secrets: SessionSecrets, challenge: string, options: SpawnChildOptions): Buffer {
  return encodePreamble({
    custody: PREAMBLE_TAG,
    sid: secrets.sid,
    key: secrets.key.toString('hex'),
    role: options.role,
    name: options.name,
    challenge,
    mode: options.mode,
    pins: { kernel: options.pins.kernel },
    limits: { max_frame_bytes: options.limits.maxFrameBytes, max_depth: options.limits.maxDepth },
    settings: options.settings,
  });
}

/**
 * The first frame must be a hello proving the expected identity within the
 * hello timeout, or, once the child announced a store migration, within the
 * migration bound from that announcement; anything else (silence, an early
 * exit, a start that failed, a wrong proof) poisons the channel, kills the
 * group and waits for the exit.
 */
async function awaitHello(
  started: StartedProcess,
  channel: ClientChannel,
  proof: { readonly sid: string; readonly challenge: string; readonly migrating: Promise<MigrationNotice> },
  options: SpawnChildOptions,
  log: Logger,
): Promise<ChildSession> {
  const { child, pid, exited, drained, kill } = started;
  const exitedEarly = exited.then((exit) => {
    throw channel.termination ?? new CustodyError('peer_exited', `${options.name} exited (code ${exit.code}, signal ${exit.signal}) before its hello`);
  });
  try {
    const answered = Promise.race([channel.hello, started.spawnFailure, exitedEarly, abandoned(options)]);
    const first = await withTimeout(Promise.race([answered.then((body) => ({ hello: body })), proof.migrating.then((notice) => ({ notice }))]), options.helloTimeoutMs, () => {
      throw new CustodyError('deadline_exceeded', `${options.name} sent no hello within ${options.helloTimeoutMs} ms`);
    });
    let hello: HelloBody;
    if ('hello' in first) {
      hello = first.hello;
    } else {
      const migrateMs = Math.max(options.migrateTimeoutMs ?? 0, options.helloTimeoutMs);
      const { store, from, to } = first.notice;
      log.warn('child_migrating', { store, from, to, wait_ms: migrateMs });
      hello = await withTimeout(answered, migrateMs, () => {
        throw new CustodyError(
          'deadline_exceeded',
          `${options.name} sent no hello within ${migrateMs} ms of starting its store migration (timing.migrate_timeout_ms); killed, its migration rolls back — raise the bound and start again (a child on another host may go on migrating there until its launcher's end reaches it)`,
        );
      });
    }
    verifyHello(hello, { ...proof, role: options.role }, options.expect);
    if (pid === undefined) throw new CustodyError('peer_exited', `${options.name} has no pid`);
    return { process: child, pid, sid: proof.sid, channel, hello, exited, drained, kill };
  } catch (error) {
    const reason = error instanceof CustodyError ? error : new CustodyError('hello_invalid', String(error));
    // A start abandoned by a stop is neither the child's refusal nor a fault on its channel (the logs and
    // supervisor.db's incidents said channel_poisoned for every SIGTERM during a boot).
    if (reason.code === 'shutting_down') {
      log.info('child_start_abandoned', errorFields(reason));
      channel.close(reason);
    } else {
      log.warn('child_refused', errorFields(reason));
      channel.poison(reason);
    }
    kill('SIGKILL');
    await exited;
    throw reason;
  } finally {
    exitedEarly.catch(() => undefined);
  }
}
