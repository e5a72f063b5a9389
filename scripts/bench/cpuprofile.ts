// node dist/scripts/bench/cpuprofile.js FILE.cpuprofile [top]
// Summarize a `node --cpu-prof` profile (bench:ab --profile and profile.ts
// write them): busy and idle time, then the functions with the most self
// time, and the time inside a few named functions with everything they call
// (total time).
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  /** Everything sampled, ms. */
  readonly all: number;
  readonly idle: number;
  /** Self time by function and place, ms. */
  readonly self: ReadonlyMap<string, number>;
  /** Time with everything called, by function name (counted once per stack), ms. */
  readonly total: ReadonlyMap<string, number>;
}

export function summarizeProfile(file: string): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfById = new Map<number, number>();
  profile.samples.forEach((id, i) => selfById.set(id, (selfById.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000));
  const label = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}`;
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let idle = 0;
  let all = 0;
  for (const [id, ms] of selfById) {
    const node = byId.get(id)!;
    all += ms;
    if (node.callFrame.functionName === '(idle)') {
      idle += ms;
      continue;
    }
    self.set(label(node), (self.get(label(node)) ?? 0) + ms);
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const name = byId.get(at)!.callFrame.functionName;
      if (name && !seen.has(name)) {
        seen.add(name);
        total.set(name, (total.get(name) ?? 0) + ms);
      }
    }
  }
  return { all, idle, self, total };
}

/** The `top` heaviest functions by self time, heaviest first. */
export function heaviest(summary: ProfileSummary, top: number): Array<[string, number]> {
  return [...summary.self].sort((a, b) => b[1] - a[1]).slice(0, top);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [file, topArg] = process.argv.slice(2);
  if (!file) throw new Error('usage: cpuprofile.js FILE.cpuprofile [top]');
  const summary = summarizeProfile(file);
  const out = (line: string) => process.stdout.write(line + '\n');
  out(`${file}: ${summary.all.toFixed(0)} ms sampled, idle ${summary.idle.toFixed(0)} ms, busy ${(summary.all - summary.idle).toFixed(0)} ms`);
  out('self time:');
  for (const [name, ms] of heaviest(summary, Number(topArg ?? 15))) out(`  ${ms.toFixed(0).padStart(6)} ms  ${name}`);
  out('total time of:');
  for (const name of ['sqliteTransaction', 'flushAll', 'claimDurable', 'retainReportDurable', 'claim', 'retainReport', 'signArtifact', 'verifyAuthorization', 'parse', 'writeBuffer', 'executeOnce', 'decode', 'encode']) {
    const ms = summary.total.get(name);
    if (ms !== undefined) out(`  ${ms.toFixed(0).padStart(6)} ms  ${name}`);
  }
}
