// A child's end of its channel: it sends its hello, then serves requests.
// Each request is checked against the closed schema of its kind before the
// handler sees it; a kind this role does not serve, or a body that does not
// match, is a protocol fault that poisons the channel. Handlers run
// concurrently; each answer is one `result` or `error` frame.
import { CustodyError, toCustodyError } from '../errors.js';
import { type Logger, errorFields } from '../log.js';
import type { ChildRole } from '../protocol/common.js';
import {
  CONTROL_KINDS,
  ERROR_KIND,
  HELLO_KIND,
  type HelloBody,
  MESSAGES,
  type MessageKind,
  RESULT_KIND,
  isMessageKind,
} from '../protocol/messages.js';
import { type ChannelState, FrameChannel, type FrameChannelOptions } from './channel.js';
import type { Frame } from './frame-codec.js';
import { describeIssues } from './session.js';

export interface RequestContext {
  /** The request's frame id. */
  readonly id: string;
}

export type RequestHandler = (kind: MessageKind, body: unknown, context: RequestContext) => Promise<unknown>;

export interface ServerChannelOptions extends FrameChannelOptions {
  readonly role: ChildRole;
  readonly handler: RequestHandler;
  /** Requests handled at once; past it a request is answered `too_many_in_flight`. */
  readonly maxInFlight: number;
  /** The channel stopped: input ended (`closed`) or a protocol fault (`poisoned`). */
  readonly onTerminated: (reason: CustodyError, state: ChannelState) => void;
}

export class ServerChannel {
  readonly #core: FrameChannel;
  readonly #log: Logger;
  readonly #role: ChildRole;
  readonly #handler: RequestHandler;
  readonly #maxInFlight: number;
  readonly #onTerminated: ServerChannelOptions['onTerminated'];
  readonly #inFlight = new Map<string, Promise<void>>();

  constructor(options: ServerChannelOptions) {
    this.#core = new FrameChannel(options);
    this.#log = options.log;
    this.#role = options.role;
    this.#handler = options.handler;
    this.#maxInFlight = options.maxInFlight;
    this.#onTerminated = options.onTerminated;
  }

  get state(): ChannelState {
    return this.#core.state;
  }

  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** Send the hello (the first frame), then start reading requests. */
  start(hello: HelloBody, initial?: Buffer): void {
    this.#core.send(HELLO_KIND, HELLO_KIND, hello);
    this.#core.attach({ frame: (frame) => this.#onFrame(frame), terminated: this.#onTerminated }, initial);
  }

  /** Resolves when every request being handled has been answered. */
  async whenIdle(): Promise<void> {
    while (this.#inFlight.size > 0) {
      await Promise.allSettled([...this.#inFlight.values()]);
    }
  }

  poison(reason: CustodyError): void {
    this.#core.poison(reason);
  }

  /** A frame the child sends unasked after its hello (`head`); its id is its kind. False when it could not be sent. */
  sendUnasked(kind: string, body: Record<string, unknown>): boolean {
    try {
      this.#core.send(kind, kind, body);
      return true;
    } catch (error) {
      this.#log.warn('frame_not_sent', { kind, ...errorFields(error) });
      return false;
    }
  }

  #onFrame(frame: Frame): void {
    const kind = frame.kind;
    if (!isMessageKind(kind) || !(MESSAGES[kind].to as readonly string[]).includes(this.#role)) {
      throw new CustodyError('unexpected_message', `a ${this.#role} does not serve ${kind}`);
    }
    const parsed = MESSAGES[kind].request.safeParse(frame.body);
    if (!parsed.success) {
      throw new CustodyError('schema_violation', `${kind} request: ${describeIssues(parsed.error)}`);
    }
    if (this.#inFlight.has(frame.id)) {
      throw new CustodyError('duplicate_request', `request id ${frame.id} is already being handled`);
    }
    if (this.#inFlight.size >= this.#maxInFlight && !CONTROL_KINDS.has(kind)) {
      this.#answerError(frame.id, new CustodyError('too_many_in_flight', `${this.#maxInFlight} requests already in flight`));
      return;
    }
    const done = this.#handle(kind, frame.id, parsed.data).finally(() => this.#inFlight.delete(frame.id));
    this.#inFlight.set(frame.id, done);
  }

  async #handle(kind: MessageKind, id: string, body: unknown): Promise<void> {
    let result: unknown;
    try {
      result = await this.#handler(kind, body, { id });
    } catch (error) {
      const failure = toCustodyError(error);
      if (failure.code === 'internal') this.#log.error('request_failed', { kind, id, ...errorFields(error) });
      this.#answerError(id, failure);
      return;
    }
    const checked = MESSAGES[kind].result.safeParse(result);
    if (!checked.success) {
      this.#log.error('result_schema_violation', { kind, id, issues: describeIssues(checked.error) });
      this.#answerError(id, new CustodyError('internal', `${kind} produced a result outside its schema`));
      return;
    }
    try {
      this.#core.send(RESULT_KIND, id, checked.data);
    } catch (error) {
      // A result too large or too deep for a frame still gets an answer, an
      // error one (docs/PROTOCOL.md §5): the requester must not wait for good.
      const failure = toCustodyError(error, 'channel_closed');
      if (failure.code === 'frame_too_large' || failure.code === 'frame_too_deep') this.#answerError(id, failure);
      else this.#log.warn('answer_not_sent', { id, kind, ...errorFields(error) });
    }
  }

  #answerError(id: string, error: CustodyError): void {
    const wire = error.code === 'internal' ? { code: error.code, message: 'internal error; see the child log' } : error.toWire();
    this.#send(ERROR_KIND, id, { ...wire });
  }

  #send(kind: string, id: string, body: Record<string, unknown>): void {
    try {
      this.#core.send(kind, id, body);
    } catch (error) {
      this.#log.warn('answer_not_sent', { id, kind, ...errorFields(error) });
    }
  }
}
