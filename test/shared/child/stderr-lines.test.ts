// A child's stderr in the supervisor's log (shared/child/spawn.ts): every
// line of the log parses as JSON. A child's JSON log line passes as it is;
// anything else (a crash trace, a wrapper's ssh warning, text glued to a log
// line by a partial write, a line past its bound) is wrapped as child_stderr,
// and a line that never ends costs no memory past the bound.
import { expect } from 'chai';
import { PassThrough } from 'node:stream';
import { CHILD_LINE_MAX_BYTES, asLogLine } from '../../../shared/child/spawn.js';
import { forwardLines } from '../../../shared/child/output-lines.js';

describe("a child's stderr lines in the supervisor's log", () => {
  it('passes a JSON log line as it is, and wraps anything else as child_stderr, lone surrogates made U+FFFD', () => {
    const own = '{"ts":"2026-01-01T00:00:00.000Z","level":"info","role":"executor","event":"child_serving"}';
    expect(asLogLine(own, 0, 'default')).to.equal(own);
    expect(asLogLine(`${own}\r`, 0, 'default'), 'ended with CRLF').to.equal(own);
    for (const text of ["Warning: Permanently added 'host' (ED25519) to the list of known hosts.", `partial line without newline then exec${own}`, 'x\ud800y']) {
      const wrapped = JSON.parse(asLogLine(text, 0, 'default')) as Record<string, unknown>;
      expect(wrapped).to.include({ level: 'warn', event: 'child_stderr', child: 'default', line: text.replace('\ud800', '\ufffd') });
    }
    // A JSON line cut at the bound no longer parses: wrapped, with what was dropped.
    expect(JSON.parse(asLogLine(own.slice(0, 20), 5, 'kernel'))).to.include({ event: 'child_stderr', dropped_bytes: 5 });
  });

  it(`keeps at most ${CHILD_LINE_MAX_BYTES} bytes of a line and counts the rest, at the bound and one past`, () => {
    const input = new PassThrough();
    const lines: Array<[number, number]> = [];
    forwardLines(input, CHILD_LINE_MAX_BYTES, (line, dropped) => lines.push([Buffer.byteLength(line), dropped]));
    input.write(Buffer.alloc(CHILD_LINE_MAX_BYTES, 'a'));
    input.write('\n');
    input.write(Buffer.alloc(CHILD_LINE_MAX_BYTES + 1, 'b'));
    input.end('\n');
    expect(lines).to.deep.equal([
      [CHILD_LINE_MAX_BYTES, 0],
      [CHILD_LINE_MAX_BYTES, 1],
    ]);
  });
});
