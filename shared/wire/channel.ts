// The stdio adapter around the pure FrameReader and a SessionEndpoint: one
// channel per child process and session. A channel is open, then poisoned
// (a protocol error: nothing more is read or acted upon) or closed (the
// stream ended or the owner closed it). The first termination reason wins
// and every later question about the channel gets that reason.
import type { Readable } from 'node:stream';
import { CustodyError, toCustodyError } from '../errors.js';
import { type Logger, errorFields } from '../log.js';
import { defineMachine, Machine } from '../state-machine.js';
import type { Frame } from './frame-codec.js';
import { FrameReader } from './frame-reader.js';
import type { SessionEndpoint } from './session.js';

export type ChannelState = 'open' | 'poisoned' | 'closed';

export const CHANNEL_MACHINE = defineMachine<ChannelState>('channel', {
  open: ['poisoned', 'closed'],
  poisoned: ['closed'],
  closed: [],
});

export interface ChannelHandlers {
  /** A frame that passed the MAC, envelope, session and sequence checks. */
  frame(frame: Frame): void;
  /** Called once, with the first termination reason. */
  terminated(reason: CustodyError, state: ChannelState): void;
}

/** Where frames are written: a child's stdin pipe, or a child's own stdout. */
export interface FrameOutput {
  write(chunk: Buffer): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** A stream that can hold writes (a child's stdin pipe): the frames of one turn leave in one write. */
  cork?(): void;
  uncork?(): void;
}

export interface FrameChannelOptions {
  readonly input: Readable;
  readonly output: FrameOutput;
  readonly endpoint: SessionEndpoint;
  readonly log: Logger;
}

export class FrameChannel {
  readonly endpoint: SessionEndpoint;
  readonly #input: Readable;
  readonly #output: FrameOutput;
  readonly #log: Logger;
  readonly #reader: FrameReader<Frame>;
  readonly #machine: Machine<ChannelState>;
  #handlers: ChannelHandlers | null = null;
  #termination: CustodyError | null = null;
  #outputFailure: CustodyError | null = null;
  #corked = false;

  constructor(options: FrameChannelOptions) {
    this.endpoint = options.endpoint;
    this.#input = options.input;
    this.#output = options.output;
    this.#log = options.log;
    this.#reader = new FrameReader<Frame>(options.endpoint.limits, (line) => options.endpoint.open(line));
    this.#machine = new Machine(CHANNEL_MACHINE, 'open', (from, to, reason) =>
      this.#log.debug('channel_state', { sid: this.endpoint.sid, from, to, reason }),
    );
  }

  get state(): ChannelState {
    return this.#machine.state;
  }

  /** Why the channel stopped, or null while it is open. */
  get termination(): CustodyError | null {
    return this.#termination;
  }

  /** Start reading. `initial` holds bytes that arrived with the preamble. */
  attach(handlers: ChannelHandlers, initial?: Buffer): void {
    if (this.#handlers) throw new Error('channel already attached');
    this.#handlers = handlers;
    this.#input.on('data', this.#onData);
    this.#input.once('end', this.#onEnd);
    this.#input.once('error', this.#onInputError);
    this.#output.on('error', this.#onOutputError);
    if (initial && initial.length > 0) this.#onData(initial);
  }

  /**
   * Seal and write one frame. Refused on a poisoned channel and after a
   * write failure; allowed after the input ended, so a child whose
   * supervisor closed its stdin can still deliver the answers it owes.
   */
  send(kind: string, id: string, body: Record<string, unknown>): void {
    if (this.#machine.state === 'poisoned' && this.#termination) throw this.#termination;
    if (this.#outputFailure) throw this.#outputFailure;
    this.#write(this.endpoint.seal(kind, id, body));
  }

  /**
   * The frames written in one turn leave together in one writev when the
   * output can hold them: one system call and one wake-up of the reader
   * instead of one per frame (docs/PERFORMANCE.md, "Frames of one turn").
   * The output is released on the tick after the turn's microtasks have all
   * run (a microtask queues that tick, and ticks wait for the microtask
   * queue to drain), so the answers a batch's promises send go out with
   * what the batch wrote itself, such as the kernel's head frame before
   * them. The order is kept; a frame waits at most for the rest of its
   * turn, the synchronous work of that turn's continuations included (a
   * grouped commit started from one), never for a later turn.
   */
  #write(line: Buffer): void {
    const output = this.#output;
    if (!this.#corked && output.cork && output.uncork) {
      output.cork();
      this.#corked = true;
      queueMicrotask(() =>
        process.nextTick(() => {
          this.#corked = false;
          output.uncork!();
        }),
      );
    }
    output.write(line);
  }

  /** Write an already sealed frame line (conformance tooling). */
  writeRaw(line: Buffer): void {
    if (this.#machine.state === 'poisoned' && this.#termination) throw this.#termination;
    if (this.#outputFailure) throw this.#outputFailure;
    this.#write(line);
  }

  /** A protocol fault: stop reading, record the reason (first one wins). */
  poison(reason: CustodyError): void {
    if (this.#machine.state !== 'open') return;
    this.#log.warn('channel_poisoned', { sid: this.endpoint.sid, ...errorFields(reason) });
    this.#stop('poisoned', reason);
  }

  /** The stream ended or the owner is done with it. */
  close(reason: CustodyError = new CustodyError('channel_closed')): void {
    if (this.#machine.state === 'closed') return;
    if (this.#machine.state === 'poisoned') {
      this.#machine.moveTo('closed', reason.code);
      return;
    }
    this.#stop('closed', reason);
  }

  #stop(to: 'poisoned' | 'closed', reason: CustodyError): void {
    this.#termination ??= reason;
    this.#machine.moveTo(to, reason.code);
    this.#input.off('data', this.#onData);
    this.#input.pause();
    this.#handlers?.terminated(this.#termination, to);
  }

  #onData = (chunk: Buffer): void => {
    if (this.#machine.state !== 'open') return;
    const { frames, error } = this.#reader.push(chunk);
    for (const frame of frames) {
      if (this.#machine.state !== 'open') return;
      try {
        this.#handlers?.frame(frame);
      } catch (fault) {
        this.poison(toCustodyError(fault, 'unexpected_message'));
        return;
      }
    }
    if (error) this.poison(error);
  };

  #onEnd = (): void => {
    const partial = this.#reader.end();
    if (partial) this.poison(partial);
    this.close(new CustodyError('channel_closed', 'the peer closed its end of the channel'));
  };

  #onInputError = (error: Error): void => {
    this.close(new CustodyError('channel_closed', `read failed: ${error.message}`, { cause: error }));
  };

  #onOutputError = (error: Error): void => {
    this.#outputFailure ??= new CustodyError('channel_closed', `write failed: ${error.message}`, { cause: error });
    this.close(new CustodyError('channel_closed', `write failed: ${error.message}`, { cause: error }));
  };
}
