// The receiving end of the wire benchmark: reads frames from stdin until it
// has seen the number it was told, then prints one line on stdout. Mode
// `raw` is the baseline (bounded line splitting and JSON.parse); mode `auth`
// is custody's reader: preamble, MAC on the raw bytes, strict decoding,
// envelope, sequence and the message schema.
import { LineSplitter } from '../../shared/wire/line-splitter.js';
import { FrameReader, DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { PreambleReader } from '../../shared/wire/preamble.js';
import { SessionEndpoint } from '../../shared/wire/session.js';
import { MESSAGES } from '../../shared/protocol/messages.js';

const [mode, countText] = process.argv.slice(2);
const expected = Number(countText);
let seen = 0;

function done(): void {
  process.stdout.write(`done ${seen}\n`);
  process.exit(0);
}

if (mode === 'raw') {
  const splitter = new LineSplitter(DEFAULT_FRAME_LIMITS.maxFrameBytes);
  process.stdin.on('data', (chunk: Buffer) => {
    splitter.push(chunk, (line) => {
      JSON.parse(line.toString('utf8'));
      if (++seen === expected) done();
    });
  });
} else {
  const preambles = new PreambleReader();
  let reader: FrameReader<{ body: Record<string, unknown> }> | null = null;
  process.stdin.on('data', (chunk: Buffer) => {
    if (!reader) {
      const read = preambles.push(chunk);
      if (!read) return;
      const endpoint = new SessionEndpoint({
        secrets: { sid: read.preamble.sid, key: Buffer.from(read.preamble.key, 'hex') },
        side: 'child',
        self: 'kernel',
        peer: 'supervisor',
        limits: DEFAULT_FRAME_LIMITS,
      });
      reader = new FrameReader(DEFAULT_FRAME_LIMITS, (line) => endpoint.open(line));
      chunk = read.rest;
    }
    const { frames, error } = reader.push(chunk);
    if (error) throw error;
    for (const frame of frames) {
      MESSAGES.echo.request.parse(frame.body);
      if (++seen === expected) done();
    }
  });
}
