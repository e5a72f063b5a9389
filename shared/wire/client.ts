// The supervisor's end of a child's channel: the child's hello, then
// requests with exactly one answer each. Pending requests live in one table;
// when the channel ends, every one of them is rejected with the recorded
// cause and further requests are refused (STYLE.md "pending requests in one
// table").
import { CustodyError, toCustodyError } from '../errors.js';
import type { Logger } from '../log.js';
import { withTimeout } from '../timeout.js';
import type { ChildRole } from '../protocol/common.js';
import {
  CONTROL_KINDS,
  ERROR_KIND,
  FATAL_KIND,
  HEAD_KIND,
  HELLO_KIND,
  type HelloBody,
  MESSAGES,
  type MessageKind,
  RESULT_KIND,
  type RequestOf,
  type ResultOf,
  errorBody,
  fatalBody,
  headBody,
  helloBody,
} from '../protocol/messages.js';
import { type ChannelState, FrameChannel, type FrameChannelOptions } from './channel.js';
import type { Frame } from './frame-codec.js';
import { type SessionEndpoint, describeIssues } from './session.js';

interface Pending {
  readonly kind: MessageKind;
  resolve(value: unknown): void;
  reject(reason: CustodyError): void;
}

export interface ClientChannelOptions extends FrameChannelOptions {
  readonly peerRole: ChildRole;
  /** Requests awaiting an answer at once; one more is refused locally. */
  readonly maxInFlight: number;
  /** Called once when the channel stops, with the first reason. */
  readonly onTerminated?: (reason: CustodyError, state: ChannelState) => void;
  /**
   * The child's store head advanced (a `head` frame, docs/ROLLBACK.md). Called
   * in frame order, before any later answer is delivered. Without it a `head`
   * frame is a protocol fault.
   */
  readonly onHead?: (head: number) => void;
}

export interface RequestOptions {
  /** The frame id; defaults to a fresh one. Must not be pending already. */
  readonly id?: string;
  /** Reject with `deadline_exceeded` after this long; the request stays abandoned, a late answer is ignored. */
  readonly timeoutMs?: number;
}

const ABANDONED_MEMORY = 1024;

export class ClientChannel {
  readonly #core: FrameChannel;
  readonly #log: Logger;
  readonly #peerRole: ChildRole;
  readonly #maxInFlight: number;
  readonly #onTerminated: ClientChannelOptions['onTerminated'];
  readonly #onHead: ClientChannelOptions['onHead'];
  readonly #pending = new Map<string, Pending>();
  readonly #abandoned = new Set<string>();
  #nextId = 0;
  #helloSeen = false;
  #helloSettle!: { resolve(body: HelloBody): void; reject(reason: CustodyError): void };

  /** The child's first frame. Rejects with the child's `fatal` error or the channel's end. */
  readonly hello: Promise<HelloBody>;

  constructor(options: ClientChannelOptions) {
    this.#core = new FrameChannel(options);
    this.#log = options.log;
    this.#peerRole = options.peerRole;
    this.#maxInFlight = options.maxInFlight;
    this.#onTerminated = options.onTerminated;
    this.#onHead = options.onHead;
    this.hello = new Promise<HelloBody>((resolve, reject) => {
      this.#helloSettle = { resolve, reject };
    });
    // A hello nobody awaits must not become an unhandled rejection.
    this.hello.catch(() => undefined);
  }

  get state(): ChannelState {
    return this.#core.state;
  }

  get termination(): CustodyError | null {
    return this.#core.termination;
  }

  get inFlight(): number {
    return this.#pending.size;
  }

  get sid(): string {
    return this.#core.endpoint.sid;
  }

  /** The session endpoint, for tools that must put exact bytes on the wire (conformance tests). */
  get endpoint(): SessionEndpoint {
    return this.#core.endpoint;
  }

  start(initial?: Buffer): void {
    this.#core.attach({ frame: (frame) => this.#onFrame(frame), terminated: (reason, state) => this.#onEnd(reason, state) }, initial);
  }

  request<K extends MessageKind>(kind: K, body: RequestOf<K>, options: RequestOptions = {}): Promise<ResultOf<K>> {
    const termination = this.#core.termination;
    if (termination && this.#core.state !== 'open') return Promise.reject(termination);
    const spec = MESSAGES[kind];
    if (!(spec.to as readonly string[]).includes(this.#peerRole)) {
      return Promise.reject(new CustodyError('unexpected_message', `a ${this.#peerRole} does not serve ${kind}`));
    }
    const checked = spec.request.safeParse(body);
    if (!checked.success) {
      return Promise.reject(new CustodyError('schema_violation', `outgoing ${kind}: ${describeIssues(checked.error)}`));
    }
    if (this.#pending.size >= this.#maxInFlight && !CONTROL_KINDS.has(kind)) {
      return Promise.reject(new CustodyError('too_many_in_flight', `${this.#maxInFlight} requests already in flight to this ${this.#peerRole}`));
    }
    const id = options.id ?? `q${++this.#nextId}`;
    if (this.#pending.has(id)) {
      return Promise.reject(new CustodyError('duplicate_request', `request id ${id} is already pending`));
    }
    const answer = new Promise<ResultOf<K>>((resolve, reject) => {
      this.#pending.set(id, { kind, resolve: resolve, reject });
    });
    try {
      this.#core.send(kind, id, checked.data);
    } catch (error) {
      this.#pending.delete(id);
      return Promise.reject(toCustodyError(error, 'channel_closed'));
    }
    const timeoutMs = options.timeoutMs;
    if (timeoutMs === undefined || timeoutMs === Number.POSITIVE_INFINITY) return answer;
    // The deadline's error is made only when it passes, and only once it has really passed (shared/timeout.ts).
    return withTimeout(answer, timeoutMs, () => {
      // A late answer to an abandoned id is dropped, not taken for a protocol error.
      this.#abandon(id);
      throw new CustodyError('deadline_exceeded', `${kind} ${id} had no answer within ${timeoutMs} ms`);
    });
  }

  /**
   * A request whose body is given as exact bytes, which may be invalid JSON:
   * for conformance tests that must put such bytes on a live channel. The
   * answer is not checked against a result schema.
   */
  requestRawBody(kind: string, rawBody: Buffer, id: string): Promise<unknown> {
    const termination = this.#core.termination;
    if (termination && this.#core.state !== 'open') return Promise.reject(termination);
    if (this.#pending.has(id)) return Promise.reject(new CustodyError('duplicate_request', `request id ${id} is already pending`));
    const answer = new Promise<unknown>((resolve, reject) => {
      this.#pending.set(id, { kind: 'echo', resolve, reject });
    });
    this.#core.writeRaw(this.#core.endpoint.sealRawBody(kind, id, rawBody));
    return answer;
  }

  poison(reason: CustodyError): void {
    this.#core.poison(reason);
  }

  close(reason?: CustodyError): void {
    this.#core.close(reason);
  }

  #abandon(id: string): void {
    if (!this.#pending.delete(id)) return;
    this.#abandoned.add(id);
    if (this.#abandoned.size > ABANDONED_MEMORY) {
      const oldest = this.#abandoned.values().next().value;
      if (oldest !== undefined) this.#abandoned.delete(oldest);
    }
  }

  #onFrame(frame: Frame): void {
    if (!this.#helloSeen) {
      this.#onFirstFrame(frame);
      return;
    }
    if (frame.kind === HEAD_KIND && this.#onHead) {
      const parsed = headBody.safeParse(frame.body);
      if (!parsed.success) throw new CustodyError('schema_violation', `head body: ${describeIssues(parsed.error)}`);
      this.#onHead(parsed.data.head);
      return;
    }
    if (frame.kind !== RESULT_KIND && frame.kind !== ERROR_KIND) {
      throw new CustodyError('unexpected_message', `a child may not send ${frame.kind} after its hello`);
    }
    const pending = this.#pending.get(frame.id);
    if (!pending) {
      if (this.#abandoned.delete(frame.id)) {
        this.#log.info('late_answer_ignored', { id: frame.id, kind: frame.kind });
        return;
      }
      throw new CustodyError('unexpected_message', `answer for ${frame.id}, which is not pending`);
    }
    this.#pending.delete(frame.id);
    if (frame.kind === ERROR_KIND) {
      const parsed = errorBody.safeParse(frame.body);
      if (!parsed.success) {
        // The channel is poisoned below; the request it answered is settled with the same fault (it is no longer pending, so the close would not reach it).
        const fault = new CustodyError('schema_violation', `error body: ${describeIssues(parsed.error)}`);
        pending.reject(fault);
        throw fault;
      }
      pending.reject(CustodyError.fromWire(parsed.data));
      return;
    }
    const parsed = MESSAGES[pending.kind].result.safeParse(frame.body);
    if (!parsed.success) {
      const fault = new CustodyError('schema_violation', `${pending.kind} result: ${describeIssues(parsed.error)}`);
      pending.reject(fault);
      throw fault;
    }
    pending.resolve(parsed.data);
  }

  #onFirstFrame(frame: Frame): void {
    this.#helloSeen = true;
    if (frame.kind === HELLO_KIND) {
      const parsed = helloBody.safeParse(frame.body);
      if (!parsed.success) throw new CustodyError('hello_invalid', `hello: ${describeIssues(parsed.error)}`);
      this.#helloSettle.resolve(parsed.data);
      return;
    }
    if (frame.kind === FATAL_KIND) {
      const parsed = fatalBody.safeParse(frame.body);
      const reason = parsed.success ? CustodyError.fromWire(parsed.data) : new CustodyError('schema_violation', 'malformed fatal frame');
      this.#helloSettle.reject(reason);
      this.#core.close(reason);
      return;
    }
    throw new CustodyError('hello_invalid', `the first frame of a child must be hello, got ${frame.kind}`);
  }

  #onEnd(reason: CustodyError, state: ChannelState): void {
    this.#helloSettle.reject(reason);
    for (const [id, pending] of this.#pending) {
      this.#pending.delete(id);
      pending.reject(reason);
    }
    this.#onTerminated?.(reason, state);
  }
}
