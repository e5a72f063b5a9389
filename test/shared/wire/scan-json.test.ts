// The one-pass scan every frame a process reads goes through (scanJson,
// shared/wire/decode.ts) answers what the two scans it replaced answered:
// the deepest nesting, and the first repeated member name of an object.
// Both references are plain scans, one step per character (the depth's in
// test/helpers/plain-depth.ts); the depth is also held to measureDepth,
// which senders still use.
import { expect } from 'chai';
import fc from 'fast-check';
import { decodeJsonObject, measureDepth, scanJson } from '../../../shared/wire/decode.js';
import { codeOf } from '../../helpers/codes.js';
import { codeUnits, plainDepth } from '../../helpers/plain-depth.js';

/** The first member name repeated in one object, one character at a time (valid JSON assumed). */
function referenceDuplicate(text: string): string | undefined {
  const open: Array<Set<string> | null> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === '\\') i++;
      const names = open[open.length - 1];
      if (expectKey && names) {
        const name = JSON.parse(text.slice(start, i + 1)) as string;
        if (names.has(name)) return name;
        names.add(name);
        expectKey = false;
      }
    } else if (c === '{') {
      open.push(new Set());
      expectKey = true;
    } else if (c === '[') {
      open.push(null);
      expectKey = false;
    } else if (c === '}' || c === ']') {
      open.pop();
      expectKey = false;
    } else if (c === ',') {
      expectKey = open[open.length - 1] != null;
    }
  }
  return undefined;
}

/**
 * Member names that collide once unescaped (each pair below names one
 * member two ways), quotes and backslashes in names, and enough of them to
 * pass the small-object list.
 */
const key = fc.oneof(
  fc.constantFrom('"a"', '"\\u0061"', '"b"', '"a\\"b"', '"{["', '""'),
  fc.constantFrom('"\\""', '"\\u0022"', '"\\\\"', '"\\u005c"', '"\\/"', '"/"', '"é"', '"\\u00e9"', '"😀"', '"\\ud83d\\ude00"'),
  fc.integer({ min: 0, max: 40 }).map((n) => `"k${n}"`),
);
const ws = fc.constantFrom('', ' ', '\n', '\t ');
const scalar = fc.oneof(
  fc.constantFrom('1', '-0.5e3', 'true', 'null', '"x"', '"[{\\"}"', '"\\\\"', '"\\\\\\"]"', '"a,b:c"'),
  fc.string({ maxLength: 40 }).map((text) => JSON.stringify(text)),
  fc.string({ unit: 'binary', maxLength: 12 }).map((text) => JSON.stringify(text)),
);
const { json } = fc.letrec<{ json: string; object: string; array: string }>((tie) => ({
  json: fc.oneof({ depthSize: 'small', withCrossShrink: true }, scalar, tie('object'), tie('array')),
  object: fc
    .tuple(fc.array(fc.tuple(ws, key, ws, ws, tie('json'), ws), { maxLength: 24 }), ws)
    .map(([members, end]) => `{${members.map(([a, name, b, c, value, d]) => `${a}${name}${b}:${c}${value}${d}`).join(',')}${end}}`),
  array: fc.tuple(fc.array(tie('json'), { maxLength: 6 }), ws).map(([items, space]) => `[${space}${items.join(`${space},`)}${space}]`),
}));

/** Not JSON at all: brackets, quotes and backslashes in any order. */
const soup = fc.array(fc.constantFrom('[', ']', '{', '}', '"', '\\', 'a', ':', ',', '"a":', '\\"'), { maxLength: 80 }).map((parts) => parts.join(''));

/** Long runs of ordinary characters between specials, and runs of backslashes before quotes. */
const runs = fc
  .array(fc.tuple(fc.integer({ min: 0, max: 120 }), fc.constantFrom('[', ']', '{', '}', '"', '\\', '"[', '\\"', '\\\\', '\\\\\\"')), { maxLength: 12 })
  .map((parts) => parts.map(([n, special]) => 'a'.repeat(n) + special).join(''));

describe('scanJson', () => {
  it('finds the same first repeated member as a character-by-character scan, in every object of valid JSON', () => {
    let repeated = 0;
    fc.assert(
      fc.property(json, (text) => {
        JSON.parse(text); // the generator makes valid JSON only
        const expected = referenceDuplicate(text);
        if (expected !== undefined) repeated++;
        expect(scanJson(text, 1_000).duplicate).to.equal(expected);
      }),
      { numRuns: 4000 },
    );
    // The property is only worth something if repeats were generated.
    expect(repeated).to.be.greaterThan(400);
  });

  it('measures the depth a plain scan measures, and measureDepth, at every limit, on JSON, soup and long runs, and never throws', () => {
    fc.assert(
      fc.property(fc.oneof(json, soup, runs), fc.integer({ min: 0, max: 12 }), (text, limit) => {
        const depth = scanJson(text, limit).depth;
        expect(depth).to.equal(plainDepth(codeUnits(text), limit));
        expect(depth).to.equal(measureDepth(Buffer.from(text), limit));
      }),
      { numRuns: 4000 },
    );
  });

  it('tells an escaped quote from a closing one by the run of backslashes before it', () => {
    expect(scanJson('{"a":"\\\\","a":1}', 32).duplicate).to.equal('a');
    expect(scanJson('{"a":"\\"","b":{"a":1}}', 32).duplicate).to.equal(undefined);
    expect(scanJson('{"a\\\\":1,"a\\\\":2}', 32).duplicate).to.equal('a\\');
    expect(scanJson('{"a":"[[[\\"]]]{{","b":[1]}', 32).depth).to.equal(2);
  });

  it('finds a member named __proto__ at any depth, escaped or not, and never a value or a longer name', () => {
    for (const text of ['{"__proto__":1}', '{"a":{"b":[{"__proto__":null}]}}', '{"\\u005f_proto__":{}}', '{"a":1,"__proto__":{"x":1}}']) {
      expect(scanJson(text, 32).reserved, text).to.equal(true);
      expect(codeOf(() => decodeJsonObject(Buffer.from(text), 32))).to.equal('frame_malformed');
    }
    for (const text of ['{"a":"__proto__"}', '{"__proto__x":1}', '{"_proto__":1}', '["__proto__"]', '{"a":["__proto__",{"b":"__proto__"}]}']) {
      expect(scanJson(text, 32).reserved, text).to.equal(false);
    }
    // What it guards against: JSON.parse keeps the member, zod's records drop it.
    expect(Object.keys(JSON.parse('{"__proto__":1,"a":2}') as object)).to.deep.equal(['__proto__', 'a']);
  });

  it('finds a repeat past the small list of names, and in a later object once one object grew past it', () => {
    const names = Array.from({ length: 20 }, (_, i) => `"n${i}":${i}`);
    expect(scanJson(`{${names.join(',')},"n0":0}`, 32).duplicate).to.equal('n0');
    expect(scanJson(`{${names.join(',')},"n19":0}`, 32).duplicate).to.equal('n19');
    expect(scanJson(`{${names.join(',')},"m":{"a":1,"a":2}}`, 32).duplicate).to.equal('a');
    expect(scanJson(`{${names.join(',')}}`, 32).duplicate).to.equal(undefined);
  });

  it('finds a repeat at the switch from the list of names to a Set: after 16 names, and after 17', () => {
    for (const count of [16, 17]) {
      const names = Array.from({ length: count }, (_, i) => `"n${i}":${i}`).join(',');
      expect(scanJson(`{${names},"n0":0}`, 32).duplicate, `${count} names`).to.equal('n0');
      expect(scanJson(`{${names},"n${count - 1}":0}`, 32).duplicate, `${count} names`).to.equal(`n${count - 1}`);
      expect(scanJson(`{${names},"m":0}`, 32).duplicate, `${count} names`).to.equal(undefined);
    }
  });

  it('refuses a repeat hidden behind an escape, and lets the same name stand in sibling objects', () => {
    expect(() => decodeJsonObject(Buffer.from('{"body":{"note":1,"\\u006eote":2}}'), 32)).to.throw('has the member "note" twice in one object');
    expect(decodeJsonObject(Buffer.from('{"a":{"x":1},"b":{"x":2},"c":[{"x":3},{"x":4}]}'), 32)).to.deep.equal({ a: { x: 1 }, b: { x: 2 }, c: [{ x: 3 }, { x: 4 }] });
  });

  it('says a text is malformed, or not an object, before it says it repeats a member', () => {
    expect(() => decodeJsonObject(Buffer.from('{"a":1,"a":2,}'), 32)).to.throw('is not valid JSON');
    expect(() => decodeJsonObject(Buffer.from('[{"a":1,"a":2}]'), 32)).to.throw('is not a JSON object at top level');
  });

  it('stops reading member names at the first it cannot unescape: the text is malformed, and a line of them costs one failed parse, not one each', () => {
    const text = `{${'"\\x":1,'.repeat(1000)}"z":1}`;
    const parse = JSON.parse;
    let parses = 0;
    JSON.parse = ((...args: Parameters<typeof JSON.parse>) => {
      parses++;
      return parse(...args) as unknown;
    }) as typeof JSON.parse;
    try {
      expect(scanJson(text, 32)).to.deep.equal({ depth: 1, duplicate: undefined, reserved: false });
    } finally {
      JSON.parse = parse;
    }
    expect(parses).to.equal(1);
    expect(() => decodeJsonObject(Buffer.from(text), 32)).to.throw('is not valid JSON');
  });

  it('says a too deep text is too deep before it says it is malformed or repeats a member', () => {
    const deep = `{"a":1,"a":${'['.repeat(40)}`;
    expect(() => decodeJsonObject(Buffer.from(deep), 32)).to.throw().with.property('code', 'frame_too_deep');
  });
});
