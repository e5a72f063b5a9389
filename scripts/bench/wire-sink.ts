// The receiving end of the wire benchmark: reads frames from stdin until it
// has seen the number it was told, then prints one line on stdout. Mode
// `raw` is the baseline (bounded line splitting and JSON.parse); mode `auth`
// is custody's reader: preamble, MAC on the raw bytes, strict decoding,
// envelope, sequence and the message schema. With the count `echo` it
// answers each frame instead, as a child answers a request (raw: the line
// back; auth: a sealed `result` frame with the request's id and body), for
// the round-trip figure.
import { LineSplitter } from '../../shared/wire/line-splitter.js';
import { FrameReader, DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { PreambleReader } from '../../shared/wire/preamble.js';
import { SessionEndpoint } from '../../shared/wire/session.js';
import { MESSAGES, RESULT_KIND } from '../../shared/protocol/messages.js';

const [mode, countText] = process.argv.slice(2);
const echo = countText === 'echo';
const expected = echo ? Number.POSITIVE_INFINITY : Number(countText);
let seen = 0;

function done(): void {
  process.stdout.write(`done ${seen}\n`);
  process.exit(0);
}

if (mode === 'raw') {
  const splitter = new LineSplitter(DEFAULT_FRAME_LIMITS.maxFrameBytes);
  process.stdin.on('data', (chunk: Buffer) => {
    splitter.push(chunk, (line) => {
      const value: unknown = JSON.parse(line.toString('utf8'));
      if (echo) process.stdout.write(JSON.stringify(value) + '\n');
      if (++seen === expected) done();
    });
  });
} else {
  const preambles = new PreambleReader();
  let reader: FrameReader<{ id: string; body: Record<string, unknown> }> | null = null;
  let endpoint: SessionEndpoint | null = null;
  process.stdin.on('data', (chunk: Buffer) => {
    if (!reader) {
      const read = preambles.push(chunk);
      if (!read) return;
      endpoint = new SessionEndpoint({
        secrets: { sid: read.preamble.sid, key: Buffer.from(read.preamble.key, 'hex') },
        side: 'child',
        self: 'kernel',
        peer: 'supervisor',
        limits: DEFAULT_FRAME_LIMITS,
      });
      const opened = endpoint;
      reader = new FrameReader(DEFAULT_FRAME_LIMITS, (line) => opened.open(line));
      chunk = read.rest;
    }
    const { frames, error } = reader.push(chunk);
    if (error) throw error;
    for (const frame of frames) {
      const body = MESSAGES.echo.request.parse(frame.body);
      if (echo) process.stdout.write(endpoint!.seal(RESULT_KIND, frame.id, body));
      if (++seen === expected) done();
    }
  });
}
