// The life of a child process (kernel, executor, test fixtures), the same for
// all: read the preamble from stdin, set up (open or provision the store,
// load or create the key), prove identity with hello, serve requests, and
// leave in one of three ways:
//   - stdin ends (the supervisor is gone): take no new work, let what runs
//     finish and answer, exit 0 (ARCHITECTURE.md §7 "losing the supervisor");
//   - `shutdown`: the same, after answering it;
//   - a protocol fault: the channel is poisoned; what runs may finish, then
//     exit 70 — the supervisor replaces the process with a fresh session.
// A bad command line exits 64 before reading anything; a preamble that cannot
// be read exits 65 before any frame; a setup the child refuses is reported in
// a `fatal` frame and exits 78 (docs/PROTOCOL.md §10).
import { logIgnoredSignals } from '../inspector-guard.js';
import type { Signer } from '../crypto/ed25519.js';
import { CustodyError, toCustodyError } from '../errors.js';
import { CHILD_EXIT } from '../exit-codes.js';
import { type Logger, createLogger, errorFields } from '../log.js';
import { stderrSink } from '../log-sink.js';
import { announceMigrationsTo } from '../store/migrations.js';
import { watchStoreWals } from '../store/sqlite-store.js';
import type { ChildRole } from '../protocol/common.js';
import { FATAL_KIND, HEAD_KIND, type MessageKind } from '../protocol/messages.js';
import type { Preamble } from '../protocol/preamble.js';
import { type FrameLimits, DEFAULT_FRAME_LIMITS } from '../wire/frame-reader.js';
import { signHello } from '../wire/hello.js';
import { PreambleReader } from '../wire/preamble.js';
import { type RequestContext, ServerChannel } from '../wire/server.js';
import { SessionEndpoint } from '../wire/session.js';
import { withTimeout } from '../timeout.js';
import { type FrameSink, takeFrameOutput } from './frame-output.js';
import { killOwnGroupMembers } from './process-group.js';
import { optimizeSooner } from '../tiering.js';

/** The process that started this one: once the parent is another (init, a subreaper), the supervisor is gone. */
const STARTED_BY = process.ppid;

/** A child's exit statuses (shared/exit-codes.ts, docs/PROTOCOL.md §10). */
export const EXIT = CHILD_EXIT;

export interface ChildIdentity {
  readonly id: string;
  readonly keyEpoch: number;
  readonly signer: Signer;
}

export interface ChildService {
  readonly identity: ChildIdentity;
  /** Serves the role's own message kinds; ping, echo and shutdown are answered here. */
  handle(kind: MessageKind, body: unknown, context: RequestContext): Promise<unknown>;
  /** Requests handled at once. */
  readonly maxInFlight?: number;
  /** How long in-flight work may take to finish once the child is leaving (default 30 s). */
  readonly drainTimeoutMs?: number;
  /** Answers the diagnostic `echo`; by default the body comes back unchanged. */
  echo?(body: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** The service must stop taking new work (input ended, shutdown, poison). */
  stopAccepting?(): void;
  /** Called once everything in flight has answered; release stores and locks. */
  close?(): Promise<void> | void;
  /** The head of the child's store, presented in the signed hello (docs/ROLLBACK.md); 0 without one. */
  head?(): number;
  /** Called once the channel is up: how the service announces a head that advanced (a `head` frame). */
  attachPeer?(peer: ChildPeer): void;
}

/** What a service may send its supervisor unasked, besides answers. */
export interface ChildPeer {
  /** Send a `head` frame; false when the channel can no longer carry it. */
  sendHead(head: number): boolean;
}

export interface ChildProgram {
  readonly role: ChildRole;
  /**
   * Open or provision what the child owns. Throw a CustodyError to refuse; it
   * is sent as `fatal`. `limits` are the session's frame bounds, already
   * checked: what the child sends must fit them.
   */
  setup(preamble: Preamble, log: Logger, limits: FrameLimits): Promise<ChildService>;
}

/**
 * The least a session may set: room for the hello (under 600 bytes, two
 * levels deep), so a child never provisions a store and then finds it cannot
 * say so. docs/PROTOCOL.md §11.5.
 */
export const SESSION_MIN_FRAME_BYTES = 1024;
export const SESSION_MIN_DEPTH = 2;

/** Frame limits from the preamble, accepted from the session minimum up to this build's defaults. */
function sessionLimits(preamble: Preamble): FrameLimits {
  const { max_frame_bytes: maxFrameBytes, max_depth: maxDepth } = preamble.limits;
  if (maxFrameBytes > DEFAULT_FRAME_LIMITS.maxFrameBytes || maxDepth > DEFAULT_FRAME_LIMITS.maxDepth) {
    throw new CustodyError(
      'preamble_malformed',
      `preamble limits ${maxFrameBytes} bytes / depth ${maxDepth} exceed this build's ${DEFAULT_FRAME_LIMITS.maxFrameBytes} / ${DEFAULT_FRAME_LIMITS.maxDepth}; lower them`,
    );
  }
  if (maxFrameBytes < SESSION_MIN_FRAME_BYTES || maxDepth < SESSION_MIN_DEPTH) {
    throw new CustodyError(
      'preamble_malformed',
      `preamble limits ${maxFrameBytes} bytes / depth ${maxDepth} leave no room for the hello; a session needs at least ${SESSION_MIN_FRAME_BYTES} bytes / depth ${SESSION_MIN_DEPTH}`,
    );
  }
  return { maxFrameBytes, maxDepth };
}

function readPreamble(): Promise<{ preamble: Preamble; rest: Buffer }> {
  const reader = new PreambleReader();
  const stdin = process.stdin;
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      try {
        const read = reader.push(chunk);
        if (!read) return;
        cleanup();
        stdin.pause();
        resolve(read);
      } catch (error) {
        cleanup();
        reject(toCustodyError(error, 'preamble_malformed'));
      }
    };
    const onEnd = () => {
      cleanup();
      reject(reader.end());
    };
    const cleanup = () => {
      stdin.off('data', onData);
      stdin.off('end', onEnd);
    };
    stdin.on('data', onData);
    stdin.once('end', onEnd);
  });
}

/** Run a child program to its end; resolves with the process exit code. */
export async function runChild(program: ChildProgram): Promise<number> {
  ignoreLostStderr();
  const log = createLogger({ role: program.role, pid: process.pid });
  logIgnoredSignals((event, fields) => log.warn(event, fields));
  const output = takeFrameOutput();
  const opened = await openSession(program, log);
  if (typeof opened === 'number') return opened;
  const { name, sid } = opened.preamble;
  // A host waits longer for the hello once it reads store_migrating (docs/PROTOCOL.md §5), so the line never depends on the threshold.
  announceMigrationsTo(createLogger({ role: program.role, pid: process.pid, name, sid }, { level: 'debug' }));
  const service = await setUpService(program, opened, output);
  if (typeof service === 'number') return service;
  // Its stores' write-ahead logs, held from being copied back by an operator's reader (shared/store/wal-watch.ts).
  watchStoreWals(createLogger({ role: program.role, pid: process.pid, name, sid, component: 'store' }));
  return new Serving(program.role, opened, service, output).finished;
}

/**
 * A supervisor killed with -9 takes the read end of our stderr with it. Logs
 * then have nowhere to go, but an effect still running must be allowed to
 * finish and retain its report (ARCHITECTURE.md §7 "losing the supervisor"):
 * a failed log write is dropped, never an uncaught EPIPE that ends the process.
 */
function ignoreLostStderr(): void {
  stderrSink();
}

/** What the preamble gave this process: its session, its frame bounds, the bytes read past it. */
interface OpenedSession {
  readonly preamble: Preamble;
  readonly rest: Buffer;
  readonly endpoint: SessionEndpoint;
  readonly limits: FrameLimits;
  readonly log: Logger;
}

/** Read and check the preamble (docs/PROTOCOL.md §4.1, §11.5): the session, or exit 65 when there is none usable. */
async function openSession(program: ChildProgram, log: Logger): Promise<OpenedSession | number> {
  let preamble: Preamble;
  let rest: Buffer;
  let limits: FrameLimits;
  try {
    ({ preamble, rest } = await readPreamble());
    limits = sessionLimits(preamble);
  } catch (error) {
    log.error('preamble_refused', errorFields(error));
    return EXIT.preamble;
  }
  if (preamble.role !== program.role) {
    log.error('preamble_refused', { code: 'preamble_malformed', message: `preamble is for a ${preamble.role}, this is a ${program.role}` });
    return EXIT.preamble;
  }
  const endpoint = new SessionEndpoint({
    secrets: { sid: preamble.sid, key: Buffer.from(preamble.key, 'hex') },
    side: 'child',
    self: program.role,
    peer: 'supervisor',
    limits,
  });
  return { preamble, rest, endpoint, limits, log: log.child({ name: preamble.name, sid: preamble.sid }) };
}

/** The program's setup; a refusal is sent as one `fatal` frame and exits 78 (docs/PROTOCOL.md §10). */
async function setUpService(program: ChildProgram, opened: OpenedSession, output: FrameSink): Promise<ChildService | number> {
  const { log, endpoint } = opened;
  try {
    return await program.setup(opened.preamble, log, opened.limits);
  } catch (error) {
    const refusal = toCustodyError(error);
    log.error('setup_refused', errorFields(error));
    try {
      output.write(endpoint.seal(FATAL_KIND, FATAL_KIND, { ...refusal.toWire() }));
    } catch (fault) {
      log.warn('fatal_not_sent', errorFields(fault));
    }
    return EXIT.config;
  }
}

/**
 * The serving process: hello, then requests until it leaves. Leaving (input
 * ended, `shutdown`, or a poisoned channel) takes no new work, lets what runs
 * finish up to the drain timeout, closes the service and resolves `finished`
 * with the exit code (ARCHITECTURE.md §7 "losing the supervisor").
 */
class Serving {
  readonly finished: Promise<number>;
  readonly #service: ChildService;
  readonly #log: Logger;
  readonly #channel: ServerChannel;
  #finish!: (code: number) => void;
  #leaving = false;

  constructor(role: ChildRole, opened: OpenedSession, service: ChildService, output: FrameSink) {
    this.finished = new Promise<number>((resolve) => (this.#finish = resolve));
    this.#service = service;
    this.#log = opened.log;
    this.#channel = new ServerChannel({
      input: process.stdin,
      output,
      endpoint: opened.endpoint,
      log: opened.log,
      role,
      maxInFlight: service.maxInFlight ?? 64,
      handler: (kind, body, context) => this.#dispatch(kind, body, context),
      onTerminated: (reason, state) => this.#onTerminated(reason, state),
    });
    this.#start(role, opened);
  }

  /** Prove identity with the signed hello, then take frames (docs/PROTOCOL.md §5). */
  #start(role: ChildRole, { preamble, rest, log }: OpenedSession): void {
    const { identity } = this.#service;
    const hello = signHello(identity.signer, preamble.sid, preamble.challenge, { role, id: identity.id, keyEpoch: identity.keyEpoch, head: this.#service.head?.() ?? 0 });
    this.#channel.start(hello, rest);
    this.#service.attachPeer?.({ sendHead: (head) => this.#channel.sendUnasked(HEAD_KIND, { head }) });
    process.stdin.resume();
    // A serving process, not a provisioning run: its hot code optimized sooner (shared/tiering.ts).
    const optimizedSooner = preamble.mode === 'serve' && optimizeSooner();
    log.info('child_serving', { id: identity.id, key_epoch: identity.keyEpoch, mode: preamble.mode, optimized_sooner: optimizedSooner });
  }

  /** ping, echo and shutdown are answered here; the role's own kinds go to the service. */
  async #dispatch(kind: MessageKind, body: unknown, context: RequestContext): Promise<unknown> {
    // head.witnessed is an acknowledgement, not work: effects being drained may be waiting for it (docs/ROLLBACK.md).
    if (this.#leaving && kind !== 'head.witnessed') throw new CustodyError('shutting_down', 'this process is shutting down and accepts no new work');
    switch (kind) {
      case 'ping':
        return { now: Date.now() };
      case 'echo':
        return this.#service.echo ? this.#service.echo(body as Record<string, unknown>) : body;
      case 'shutdown':
        setImmediate(() => void this.#leave(EXIT.ok, 'shutdown requested'));
        return {};
      default:
        return this.#service.handle(kind, body, context);
    }
  }

  #onTerminated(reason: CustodyError, state: string): void {
    if (state === 'poisoned') {
      this.#log.error('channel_poisoned', errorFields(reason));
      void this.#leave(EXIT.software, reason.code);
    } else {
      void this.#leave(EXIT.ok, 'input ended');
    }
  }

  async #leave(code: number, why: string): Promise<void> {
    if (this.#leaving) return;
    this.#leaving = true;
    this.#log.info('child_leaving', { why, in_flight: this.#channel.inFlight });
    this.#service.stopAccepting?.();
    await this.#drain();
    try {
      await this.#service.close?.();
    } catch (error) {
      this.#log.error('close_failed', errorFields(error));
    }
    // No supervisor is left to kill and reap this process group: what it started goes with it (process-group.ts).
    if (process.ppid !== STARTED_BY) {
      const killed = killOwnGroupMembers();
      if (killed.length > 0) this.#log.warn('group_members_killed', { pids: killed, why: 'the supervisor is gone' });
    }
    this.#finish(code);
  }

  /** Wait for what is in flight to answer, at most the service's drain timeout (default 30 s). */
  async #drain(): Promise<void> {
    const drainMs = this.#service.drainTimeoutMs ?? 30_000;
    const drained = await withTimeout(this.#channel.whenIdle().then(() => true), drainMs, () => false);
    if (!drained) this.#log.warn('drain_timeout', { in_flight: this.#channel.inFlight, drain_ms: drainMs });
  }
}
