// cutText: the cut every bounded human text gets before it is sent or signed
// (an error frame's message, a report's refusal message), counted as the
// schemas count, in code points, and never leaving a lone surrogate that
// canonical JSON could not carry.
import { expect } from 'chai';
import { z } from 'zod';
import { canonicalize } from '../../../shared/canonical/jcs.js';
import { REPORT_REFUSAL_MESSAGE_MAX_CHARS } from '../../../shared/protocol/artifacts.js';
import { WIRE_ERROR_MESSAGE_MAX, cutText, wellFormedValue } from '../../../shared/text/cut.js';

describe('cutText', () => {
  it('keeps a text at the bound and cuts one past it to the bound, in code points', () => {
    const schema = z.string().max(REPORT_REFUSAL_MESSAGE_MAX_CHARS);
    const at = '😀'.repeat(REPORT_REFUSAL_MESSAGE_MAX_CHARS);
    expect(cutText(at, REPORT_REFUSAL_MESSAGE_MAX_CHARS)).to.equal(at);
    const cut = cutText(`${at}x`, REPORT_REFUSAL_MESSAGE_MAX_CHARS);
    expect(cut).to.equal(at);
    expect(schema.safeParse(cut).success).to.equal(true);
    expect(cutText('x'.repeat(WIRE_ERROR_MESSAGE_MAX + 1), WIRE_ERROR_MESSAGE_MAX)).to.have.length(WIRE_ERROR_MESSAGE_MAX);
  });

  it('never splits a surrogate pair at the cut', () => {
    expect(cutText('ab😀c', 3)).to.equal('ab😀');
    expect(cutText('ab😀c', 2)).to.equal('ab');
    expect(() => canonicalize({ message: cutText(`${'a'.repeat(1023)}😀`, 1024) })).to.not.throw();
  });

  it('replaces lone surrogates with U+FFFD, so the text can be signed', () => {
    expect(cutText('a\ud800b\udc00', 10)).to.equal('a\ufffdb\ufffd');
    expect(() => canonicalize({ message: cutText('key \ud83d', 100) })).to.not.throw();
  });

  it("wellFormedValue: an adapter's output with lone surrogates (in values and names) becomes canonical JSON that can be signed; pairs stay", () => {
    const output = { 'k\ud800': ['a\udc00', { pair: '😀', n: 1, none: null }], ok: true };
    expect(() => canonicalize(output), 'as the adapter gave it').to.throw();
    expect(canonicalize(wellFormedValue(output))).to.equal('{"k\ufffd":["a\ufffd",{"n":1,"none":null,"pair":"😀"}],"ok":true}');
  });
});
