// npm run bench:archive -- [operations]
//
// What an archival pass does to the service while it runs (docs/PERFORMANCE.md
// "Archival on its own"): a service with archival left to the operator and a
// 20 s execution window, `operations` invokes at 64 in flight, then, once
// their windows have passed, invokes one at a time for 3 s (quiet), then one
// at a time again while `POST /v1/archive` moves them all. Prints the latency
// of both and how long the pass took.
import { callApi, invokeNote, invokeNotes } from './client.js';
import { percentile, startGrantedService } from './e2e.js';
import { scriptArgs } from './args.js';

const WINDOW_MS = 20_000;
const [operations] = scriptArgs('usage: npm run bench:archive -- [operations, 8000]', { counts: [{ name: 'operations', fallback: 8000 }] }).counts as [number];

function figures(latencies: number[]) {
  const sorted = [...latencies].sort((a, b) => a - b);
  return { invokes: sorted.length, p50_ms: +percentile(sorted, 50).toFixed(1), p99_ms: +percentile(sorted, 99).toFixed(1), max_ms: +(sorted.at(-1) ?? 0).toFixed(1) };
}

const { service, remove } = await startGrantedService('custody-bench-archive-', { timing: { archive_interval_ms: 0 }, kernel: { settings: { nonce_ttl_ms: WINDOW_MS } } });
try {
  const { client } = service;
  await invokeNotes(client, operations, 64, 'archived');
  await new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 2000));
  const oneAtATime = async (until: () => boolean) => {
    const latencies: number[] = [];
    while (!until()) {
      const started = performance.now();
      await invokeNote(client, 'one at a time');
      latencies.push(performance.now() - started);
    }
    return latencies;
  };
  const quietEnd = performance.now() + 3000;
  const quiet = await oneAtATime(() => performance.now() >= quietEnd);
  let passing = true;
  const started = performance.now();
  const pass = callApi(client, 'POST', '/v1/archive', {}).finally(() => (passing = false));
  const during = await oneAtATime(() => !passing);
  const answer = (await pass).body as { executors: Array<{ archived: number }> };
  console.log(JSON.stringify({ operations, archived: answer.executors[0]?.archived, pass_ms: Math.round(performance.now() - started), quiet: figures(quiet), during_pass: figures(during) }));
} finally {
  await remove();
}
