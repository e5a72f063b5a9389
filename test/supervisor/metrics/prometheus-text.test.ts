// The strict text-format parser the metrics tests read scrapes with: it must
// refuse what a Prometheus server would, or those tests prove nothing.
import { expect } from 'chai';
import { parsePrometheusText, valueOf } from '../../helpers/prometheus-text.js';

const GOOD = [
  '# HELP x_total A counter with a \\\\ and a \\n.',
  '# TYPE x_total counter',
  'x_total{a="1",b="q\\"uote"} 3',
  'x_total 0',
  '# TYPE h histogram',
  'h_bucket{le="1"} 1',
  'h_bucket{le="+Inf"} 2',
  'h_sum 4.5',
  'h_count 2',
  '',
].join('\n');

describe('test helper: the Prometheus text parser', () => {
  it('reads a well-formed exposition: types, labels with escapes, values', () => {
    const families = parsePrometheusText(GOOD);
    expect(families.get('x_total')!.help).to.equal('A counter with a \\ and a \n.');
    expect(valueOf(families, 'x_total', { a: '1', b: 'q"uote' })).to.equal(3);
    expect(valueOf(families, 'h_count')).to.equal(2);
  });

  const BAD: Array<[string, string, RegExp]> = [
    ['a sample before its TYPE', 'y 1\n', /before its TYPE/],
    ['a series twice', '# TYPE y gauge\ny 1\ny 2\n', /appears twice/],
    ['a negative counter', '# TYPE y counter\ny -1\n', /below zero/],
    ['an unterminated label', '# TYPE y gauge\ny{a="1} 1\n', /unterminated|expected/],
    ['a bad escape', '# TYPE y gauge\ny{a="\\x"} 1\n', /bad escape/],
    ['a value that is not a number', '# TYPE y gauge\ny one\n', /bad value/],
    ['two spaces before the value', '# TYPE y gauge\ny  1\n', /expected one space/],
    ['a histogram without +Inf', '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n', /\+Inf/],
    ['buckets that are not cumulative', '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n', /cumulative/],
    ['an unknown type', '# TYPE y meter\n', /unknown type/],
    ['no final newline', '# TYPE y gauge\ny 1', /newline/],
  ];
  for (const [what, text, message] of BAD) {
    it(`refuses ${what}`, () => {
      expect(() => parsePrometheusText(text)).to.throw(message);
    });
  }
});
