// A strict parser of the Prometheus text exposition format 0.0.4, for tests
// of GET /metrics: every line is a HELP, a TYPE, a comment, blank, or a
// sample of a family whose TYPE came first; names, label syntax, escapes and
// values are checked; a series appears once; a histogram's buckets are
// cumulative, end at +Inf and agree with its _count. Anything else throws,
// naming the line.

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Family {
  readonly name: string;
  readonly type: MetricType;
  help: string | null;
  readonly samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES: readonly MetricType[] = ['counter', 'gauge', 'histogram', 'summary', 'untyped'];

export function parsePrometheusText(text: string): Map<string, Family> {
  if (text.length > 0 && !text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  const lines = text.split('\n');
  lines.pop();
  lines.forEach((line, index) => {
    const where = `line ${index + 1} ${JSON.stringify(line.slice(0, 120))}`;
    if (line === '') return;
    if (line.startsWith('#')) {
      const meta = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!meta) return; // a plain comment
      const [, keyword, name, rest = ''] = meta;
      if (!METRIC_NAME.test(name!)) throw new Error(`${where}: bad metric name`);
      if (keyword === 'TYPE') {
        if (families.has(name!) && families.get(name!)!.samples.length > 0) throw new Error(`${where}: TYPE after samples`);
        if (families.has(name!) && families.get(name!)!.type) throw new Error(`${where}: a second TYPE`);
        if (!(TYPES as readonly string[]).includes(rest)) throw new Error(`${where}: unknown type ${rest}`);
        families.set(name!, { name: name!, type: rest as MetricType, help: families.get(name!)?.help ?? null, samples: [] });
      } else {
        const family = families.get(name!);
        if (family) family.help = unescape(rest, where, false);
        else families.set(name!, { name: name!, type: undefined as unknown as MetricType, help: unescape(rest, where, false), samples: [] });
      }
      return;
    }
    const sample = parseSample(line, where);
    const family = familyOf(families, sample.name);
    if (!family || !family.type) throw new Error(`${where}: sample of ${sample.name} before its TYPE`);
    const key = `${sample.name}{${Object.entries(sample.labels).sort().map(([k, v]) => `${k}=${v}`).join(',')}}`;
    if (seen.has(key)) throw new Error(`${where}: series ${key} appears twice`);
    seen.add(key);
    if (family.type === 'counter' && (sample.value < 0 || Number.isNaN(sample.value))) throw new Error(`${where}: a counter below zero`);
    family.samples.push(sample);
  });
  for (const family of families.values()) {
    if (!family.type) throw new Error(`HELP for ${family.name} without a TYPE`);
    if (family.type === 'histogram') checkHistogram(family);
  }
  return families;
}

/** The family a sample belongs to: its own name, or a histogram/summary's with a suffix. */
function familyOf(families: Map<string, Family>, name: string): Family | undefined {
  const own = families.get(name);
  if (own) return own;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const family = families.get(name.slice(0, -suffix.length));
    if (family && (family.type === 'histogram' || (family.type === 'summary' && suffix !== '_bucket'))) return family;
  }
  return undefined;
}

function parseSample(line: string, where: string): Sample {
  const head = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line);
  if (!head) throw new Error(`${where}: no metric name`);
  const name = head[1]!;
  let at = name.length;
  const labels: Record<string, string> = {};
  if (line[at] === '{') {
    at++;
    while (line[at] !== '}') {
      const label = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(line.slice(at));
      if (!label || !LABEL_NAME.test(label[1]!)) throw new Error(`${where}: bad label at column ${at + 1}`);
      at += label[0].length;
      let value = '';
      for (;;) {
        const char = line[at];
        if (char === undefined) throw new Error(`${where}: unterminated label value`);
        at++;
        if (char === '"') break;
        if (char === '\\') {
          const next = line[at++];
          if (next === 'n') value += '\n';
          else if (next === '\\' || next === '"') value += next;
          else throw new Error(`${where}: bad escape \\${String(next)}`);
        } else value += char;
      }
      if (Object.hasOwn(labels, label[1]!)) throw new Error(`${where}: label ${label[1]} twice`);
      labels[label[1]!] = value;
      if (line[at] === ',') at++;
      else if (line[at] !== '}') throw new Error(`${where}: expected , or } at column ${at + 1}`);
    }
    at++;
  }
  const rest = /^ (\S+)(?: (-?[0-9]+))?$/.exec(line.slice(at));
  if (!rest) throw new Error(`${where}: expected one space, a value and an optional timestamp`);
  return { name, labels, value: parseValue(rest[1]!, where) };
}

function parseValue(text: string, where: string): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  if (!/^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$/.test(text)) throw new Error(`${where}: bad value ${text}`);
  return Number(text);
}

function unescape(text: string, where: string, quotes: boolean): string {
  return text.replace(/\\(.?)/g, (_m, next: string) => {
    if (next === 'n') return '\n';
    if (next === '\\' || (quotes && next === '"')) return next;
    throw new Error(`${where}: bad escape \\${next}`);
  });
}

/** Per label set (without le): buckets non-decreasing in le and count, ending at +Inf = _count, with a _sum. */
function checkHistogram(family: Family): void {
  const groups = new Map<string, { buckets: Array<[number, number]>; count?: number; sum?: number }>();
  for (const sample of family.samples) {
    const { le, ...rest } = sample.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const group = groups.get(key) ?? { buckets: [] };
    groups.set(key, group);
    if (sample.name.endsWith('_bucket')) {
      if (le === undefined) throw new Error(`${family.name}: a bucket without le`);
      group.buckets.push([parseValue(le, `${family.name} le`), sample.value]);
    } else if (sample.name.endsWith('_count')) group.count = sample.value;
    else if (sample.name.endsWith('_sum')) group.sum = sample.value;
    else throw new Error(`${family.name}: sample ${sample.name} is not a histogram series`);
  }
  for (const [key, group] of groups) {
    if (group.count === undefined || group.sum === undefined) throw new Error(`${family.name}${key}: no _count or _sum`);
    const buckets = group.buckets;
    for (let i = 1; i < buckets.length; i++) {
      if (!(buckets[i]![0] > buckets[i - 1]![0]) || buckets[i]![1] < buckets[i - 1]![1]) throw new Error(`${family.name}${key}: buckets not cumulative in increasing le`);
    }
    const last = buckets.at(-1);
    if (!last || last[0] !== Infinity || last[1] !== group.count) throw new Error(`${family.name}${key}: the +Inf bucket must equal _count`);
  }
}

/**
 * The value of one series, or 0 when the series is absent (a labelled
 * counter appears at its first increment). A family that is not exported at
 * all throws: a renamed or dropped metric must not read as a zero.
 */
export function valueOf(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  const family = familyOf(families, name);
  if (!family) throw new Error(`no metric family exports ${name}`);
  const sample = family?.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v) && Object.keys(s.labels).length === Object.keys(labels).length);
  return sample?.value ?? 0;
}
