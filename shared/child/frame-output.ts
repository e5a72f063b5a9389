// In a child, stdout is the frame channel and nothing else may ever reach it
// (ARCHITECTURE.md §4.1). This takes the real stdout for frames and points every
// ordinary output path of this process at stderr instead: console, and
// process.stdout.write itself. A subprocess an adapter spawns is the
// executor's concern (executor-proc contains it); a deliberate raw write to
// fd 1 cannot forge a frame: it fails the MAC and poisons the channel.
import type { Writable } from 'node:stream';
import { format } from 'node:util';
import { stderrSink } from '../log-sink.js';

export interface FrameSink {
  write(chunk: Buffer): boolean;
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Hold writes until uncork: the channel sends the frames of one turn in one write (shared/wire/channel.ts). */
  cork(): void;
  uncork(): void;
}

let taken: FrameSink | null = null;

export function takeFrameOutput(): FrameSink {
  if (taken) return taken;
  const stdout = process.stdout as Writable;
  const realWrite = stdout.write.bind(stdout) as (chunk: Buffer) => boolean;
  const toStderr = (...args: unknown[]): void => {
    stderrSink().write(format(...args) + '\n');
  };
  console.log = toStderr;
  console.info = toStderr;
  console.debug = toStderr;
  console.dir = toStderr;
  console.table = toStderr;
  stdout.write = ((chunk: unknown, encoding?: unknown, callback?: unknown) =>
    (process.stderr.write as (...args: unknown[]) => boolean)(chunk, encoding, callback)) as typeof stdout.write;
  taken = {
    write: realWrite,
    on: (event, listener) => stdout.on(event, listener),
    cork: () => stdout.cork(),
    uncork: () => stdout.uncork(),
  };
  // A process that exits in the turn it wrote a frame (a drill's exit 75, a
  // service closing after its last answer) still sends it: what is held is
  // written before the process ends, as an uncorked write would have been.
  process.on('exit', () => {
    while (stdout.writableCorked > 0) stdout.uncork();
  });
  return taken;
}
