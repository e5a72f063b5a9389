// Lines of what a child process prints on a pipe, for a log. Bounded:
// a line keeps at most `maxBytes` and the rest is counted, not buffered, so a
// subprocess that prints megabytes without a newline costs no memory
// (readline would hold the whole line).
import type { Readable } from 'node:stream';

const NEWLINE = 0x0a;

export function forwardLines(stream: Readable, maxBytes: number, onLine: (line: string, droppedBytes: number) => void): void {
  let parts: Buffer[] = [];
  let held = 0;
  let dropped = 0;
  const emit = () => {
    onLine(Buffer.concat(parts, held).toString('utf8'), dropped);
    parts = [];
    held = 0;
    dropped = 0;
  };
  stream.on('data', (chunk: Buffer) => {
    let start = 0;
    while (start < chunk.length) {
      const newline = chunk.indexOf(NEWLINE, start);
      const end = newline === -1 ? chunk.length : newline;
      const take = Math.min(maxBytes - held, end - start);
      if (take > 0) {
        parts.push(Buffer.from(chunk.subarray(start, start + take)));
        held += take;
      }
      dropped += end - start - take;
      if (newline === -1) return;
      emit();
      start = newline + 1;
    }
  });
  stream.on('end', () => {
    if (held > 0 || dropped > 0) emit();
  });
}
