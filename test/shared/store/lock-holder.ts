// Drives the lock fixture (test/fixtures/dir-lock-holder.ts) as a real child
// process and reads its stdout as JSON events.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { REPO_ROOT } from '../../helpers/vectors.js';

const HOLDER_SCRIPT = path.join(REPO_ROOT, 'dist', 'test', 'fixtures', 'dir-lock-holder.js');

export type HolderEvent = Record<string, unknown>;

/** A child process running the lock fixture, with its stdout read as JSON events. */
export class LockHolderProcess {
  readonly child: ChildProcessByStdio<Writable, Readable, Readable>;
  readonly exited: Promise<number | null>;
  /** Everything the child wrote on stderr, for assertions and failure messages. */
  stderr = '';
  #events: HolderEvent[] = [];
  #waiters: Array<() => void> = [];

  constructor(mode: 'hold' | 'try', dir: string) {
    this.child = spawn(process.execPath, [HOLDER_SCRIPT, mode, dir], { stdio: ['pipe', 'pipe', 'pipe'] });
    // 'close' rather than 'exit': it comes after stdout is drained, so no event is lost.
    this.exited = new Promise((resolve) => this.child.once('close', (code) => resolve(code)));
    this.child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      this.#events.push(JSON.parse(line) as HolderEvent);
      for (const wake of this.#waiters.splice(0)) wake();
    });
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error('lock holder did not start');
    return this.child.pid;
  }

  /** The next event on stdout; fails if the child exits first. */
  async nextEvent(): Promise<HolderEvent> {
    for (;;) {
      const event = this.#events.shift();
      if (event !== undefined) return event;
      const arrived = new Promise<'event'>((resolve) => this.#waiters.push(() => resolve('event')));
      const outcome = await Promise.race([arrived, this.exited.then((code) => ({ code }))]);
      if (outcome !== 'event' && this.#events.length === 0) {
        throw new Error(`lock holder exited with ${String(outcome.code)} before its next event: ${this.stderr}`);
      }
    }
  }

  async killHard(): Promise<void> {
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

export async function startHolder(dir: string): Promise<LockHolderProcess> {
  const holder = new LockHolderProcess('hold', dir);
  const event = await holder.nextEvent();
  if (event.locked !== true) throw new Error(`lock holder did not lock: ${JSON.stringify(event)}`);
  return holder;
}
