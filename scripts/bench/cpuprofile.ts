// node dist/scripts/bench/cpuprofile.js FILE.cpuprofile [top]
// Summarize a `node --cpu-prof` profile (bench:ab --profile writes them):
// busy and idle time, then the functions with the most self time, and the
// time inside a few named functions with everything they call (total time).
import { readFileSync } from 'node:fs';

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

const [file, topArg] = process.argv.slice(2);
if (!file) throw new Error('usage: cpuprofile.js FILE.cpuprofile [top]');
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const self = new Map<number, number>();
profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000));
const label = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}`;
const selfByLabel = new Map<string, number>();
const totalByName = new Map<string, number>();
let idle = 0;
let all = 0;
for (const [id, ms] of self) {
  const node = byId.get(id)!;
  all += ms;
  if (node.callFrame.functionName === '(idle)') idle += ms;
  selfByLabel.set(label(node), (selfByLabel.get(label(node)) ?? 0) + ms);
  // Total time: once per distinct function name on the stack.
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
    const name = byId.get(at)!.callFrame.functionName;
    if (name && !seen.has(name)) {
      seen.add(name);
      totalByName.set(name, (totalByName.get(name) ?? 0) + ms);
    }
  }
}
const out = (line: string) => process.stdout.write(line + '\n');
out(`${file}: ${all.toFixed(0)} ms sampled, idle ${idle.toFixed(0)} ms, busy ${(all - idle).toFixed(0)} ms`);
out('self time:');
for (const [name, ms] of [...selfByLabel].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg ?? 15))) out(`  ${ms.toFixed(0).padStart(6)} ms  ${name}`);
out('total time of:');
for (const name of ['sqliteTransaction', 'flushAll', 'claimDurable', 'retainReportDurable', 'claim', 'retainReport', 'signArtifact', 'verifyAuthorization', 'parse', 'writeBuffer', 'executeOnce', 'decode', 'encode']) {
  const ms = totalByName.get(name);
  if (ms !== undefined) out(`  ${ms.toFixed(0).padStart(6)} ms  ${name}`);
}
