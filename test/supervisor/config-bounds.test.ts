// Every bound of custody.json has a default, a config key and a test at the
// bound and one past it — all of them, found by walking the schema rather
// than listed by hand, so a key added later cannot go untested. Each default
// (and each range the README states) is also read from the README's
// configuration table, so the table cannot drift from the code.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import type { z } from 'zod';
import { parseConfig } from '../../supervisor/config/load.js';
import { configSchema } from '../../supervisor/config/schema.js';
import { executorSettingsSchema, parseExecutorSettings } from '../../shared/protocol/executor-settings.js';
import { kernelSettingsSchema, parseKernelSettings } from '../../shared/protocol/kernel-settings.js';
import { DEFAULT_MAX_FRAME_BYTES } from '../../shared/wire/frame-reader.js';
import { REPO_ROOT } from '../helpers/vectors.js';
import { configRefusal } from '../helpers/config-refusal.js';

interface Leaf {
  /** As the README names it: `bounds.max_depth`, `executors[].max_in_flight`. */
  readonly key: string;
  readonly path: readonly string[];
  readonly min: number;
  readonly max: number;
  readonly fallback: number;
}

type Node = z.ZodType & { def: { type: string; innerType?: Node; defaultValue?: unknown; shape?: Record<string, Node>; element?: Node } };

/** Every integer key of a closed schema (the configuration's, or a child's settings), with its range and its default. */
function integerLeaves(schema: z.ZodType): Leaf[] {
  const leaves: Leaf[] = [];
  const walk = (node: Node, path: string[], fallback: unknown): void => {
    if (node.def.type === 'default') {
      const value = node.def.defaultValue;
      return walk(node.def.innerType!, path, typeof value === 'function' ? (value as () => unknown)() : value);
    }
    if (node.def.type === 'nullable' || node.def.type === 'optional') return walk(node.def.innerType!, path, fallback);
    if (node.def.type === 'object') {
      for (const [name, child] of Object.entries(node.def.shape!)) walk(child, [...path, name], undefined);
      return;
    }
    if (node.def.type === 'array' && path.join('.') === 'executors') return walk(node.def.element!, [...path, '[]'], undefined);
    if (node.def.type !== 'number') return;
    const { minValue, maxValue } = node as unknown as { minValue: number; maxValue: number };
    leaves.push({ key: path.join('.').replace('.[].', '[].'), path, min: minValue, max: maxValue, fallback: fallback as number });
  };
  walk(schema, [], undefined);
  return leaves;
}

/** A configuration setting one key (an executor's inside the one executor), with whatever its neighbours must then be. */
function withKey(leaf: Leaf, value: number): Record<string, unknown> {
  const companions: Record<string, Record<string, number>> = {
    // An initial backoff may not be above its cap.
    'restart.backoff_initial_ms': { backoff_max_ms: 600_000 },
    'restart.backoff_max_ms': { backoff_initial_ms: 1 },
    'timing.retry_backoff_initial_ms': { retry_backoff_max_ms: 3_600_000 },
    'timing.retry_backoff_max_ms': { retry_backoff_initial_ms: 1 },
  };
  const [section, name] = leaf.path;
  if (leaf.path.length === 1) return { [section!]: value };
  if (section === 'executors') return { executors: [{ name: 'default', [leaf.path[2]!]: value }] };
  return { [section!]: { ...(companions[leaf.key] ?? {}), [name!]: value } };
}

function valueAt(config: unknown, leaf: Leaf): unknown {
  return leaf.path.reduce<unknown>((at, step) => (step === '[]' ? (at as unknown[])[0] : (at as Record<string, unknown>)[step]), config);
}

/** The README's configuration table: each key's documented default, and its range where one is stated. */
function documented(): Map<string, { fallback: number; range: [number, number] | null }> {
  const table = new Map<string, { fallback: number; range: [number, number] | null }>();
  const readme = readFileSync(`${REPO_ROOT}/README.md`, 'utf8');
  for (const row of readme.split('\n')) {
    const cells = /^\| (`[a-z_.[\]]+`(?: \/ `[a-z_.[\]]+`)*) \| ([^|]+) \|/.exec(row);
    if (!cells) continue;
    const names = [...cells[1]!.matchAll(/`([^`]+)`/g)].map((match) => match[1]!);
    const section = names[0]!.includes('.') ? names[0]!.slice(0, names[0]!.lastIndexOf('.') + 1) : '';
    const [defaultsText, rangesText] = cells[2]!.split('(');
    const defaults = defaultsText!.split(' / ').map((text) => Number(text.trim().replace(/[ ,]/g, '')));
    const ranges = rangesText ? rangesText.replace(/\).*$/, '').split(' / ').map((text) => text.split('–').map((n) => Number(n.replace(/[ ,]/g, '')))) : [];
    names.forEach((name, index) => {
      const key = name.includes('.') ? name : section + name;
      const range = ranges[index];
      table.set(key, { fallback: defaults[index]!, range: range && range.length === 2 && range.every(Number.isFinite) ? [range[0]!, range[1]!] : null });
    });
  }
  return table;
}


describe('every bound of custody.json', () => {
  const leaves = integerLeaves(configSchema);
  const readme = documented();

  it('is found by walking the schema: every section has its integer keys', () => {
    expect(leaves.length).to.be.at.least(30);
    for (const section of ['port', 'executors[]', 'restart', 'bounds', 'timing']) expect(leaves.some((leaf) => leaf.key.startsWith(section)), section).to.equal(true);
  });

  for (const leaf of integerLeaves(configSchema)) {
    it(`${leaf.key}: its default is the README's, and it takes ${leaf.min} and ${leaf.max} and refuses one past each, naming the key`, () => {
      const doc = readme.get(leaf.key);
      expect(doc, `${leaf.key} is in the README's configuration table`).to.not.equal(undefined);
      expect(valueAt(parseConfig({}), leaf), 'the default in force').to.equal(leaf.fallback);
      expect(doc!.fallback, 'the default the README states').to.equal(leaf.fallback);
      if (doc!.range) expect(doc!.range, 'the range the README states').to.deep.equal([leaf.min, leaf.max]);
      const named = new RegExp(leaf.key.replace('[]', '.0').replace(/\./g, '\\.'));
      for (const value of [leaf.min, leaf.max]) expect(valueAt(parseConfig(withKey(leaf, value)), leaf), `at ${value}`).to.equal(value);
      expect(configRefusal(withKey(leaf, leaf.min - 1))).to.match(named);
      if (Number.isSafeInteger(leaf.max + 1)) expect(configRefusal(withKey(leaf, leaf.max + 1))).to.match(named);
      else expect(configRefusal(withKey(leaf, leaf.max * 2))).to.match(named);
    });
  }
});

// The children's own settings (the preamble's `settings`): their tables in docs/PROTOCOL.md are rendered from
// these schemas and checked by test/docs; here each top-level bound is held at both ends and one past.
for (const [who, schema, parse, companions] of [
  ['the executor', executorSettingsSchema, parseExecutorSettings, {}],
  // An argument bound may not exceed the request bound it travels in.
  ['the kernel', kernelSettingsSchema, parseKernelSettings, { argument_bytes_default: { max_request_bytes: DEFAULT_MAX_FRAME_BYTES } }],
] as const) {
  describe(`every bound of ${who}'s settings`, () => {
    const leaves = integerLeaves(schema).filter((leaf) => leaf.path.length === 1);

    it('is found by walking the schema', () => expect(leaves.length).to.be.at.least(7));

    for (const leaf of leaves) {
      it(`${leaf.key}: takes ${leaf.min} and ${leaf.max} and refuses one past each with config_invalid, naming the key`, () => {
        const extra = (companions as Record<string, Record<string, number>>)[leaf.key] ?? {};
        for (const value of [leaf.min, leaf.max]) expect(() => parse({ ...extra, [leaf.key]: value }), `at ${value}`).to.not.throw();
        const past = Number.isSafeInteger(leaf.max + 1) ? leaf.max + 1 : leaf.max * 2;
        for (const value of [leaf.min - 1, past]) {
          expect(() => parse({ ...extra, [leaf.key]: value }), `at ${value}`).to.throw(new RegExp(leaf.key)).with.property('code', 'config_invalid');
        }
      });
    }
  });
}
