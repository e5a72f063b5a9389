// npm run bench:listing -- [operations] [rounds]
//
// What listing a history costs (docs/PERFORMANCE.md "A listing reads
// entries, not views"): a service with archival left to the operator,
// `operations` real invokes at 64 in flight, then `GET /v1/operations` of
// all of them, `rounds` times, each timed from the request to the parsed
// answer, with the CPU each process spent on it. Every answer must list
// every operation.
import { callApi, invokeNotes } from './client.js';
import { startGrantedService } from './e2e.js';
import { cpuBetween, sampleTree } from './procfs.js';
import { scriptArgs } from './args.js';

const [operations, rounds] = scriptArgs('usage: npm run bench:listing -- [operations, 20000] [rounds, 3]', {
  counts: [
    { name: 'operations', fallback: 20_000 },
    { name: 'rounds', fallback: 3 },
  ],
}).counts as [number, number];

const { service, remove } = await startGrantedService('custody-bench-listing-', { timing: { archive_interval_ms: 0 } });
try {
  const { client } = service;
  await invokeNotes(client, operations, 64, 'listed');
  const { children } = (await client.status()) as { children: Array<{ role: string; name: string; pid: number | null }> };
  for (let round = 0; round < rounds; round++) {
    const before = sampleTree(service.process.pid!, children);
    const started = performance.now();
    const answer = await callApi(client, 'GET', `/v1/operations?limit=${operations}`);
    const ms = performance.now() - started;
    const cpu = cpuBetween(before, sampleTree(service.process.pid!, children));
    const listed = (answer.body.operations as unknown[]).length;
    if (listed !== operations) throw new Error(`listed ${listed} of ${operations}`);
    console.log(JSON.stringify({ operations, round, listing_ms: Math.round(ms), ms_per_1000: +((ms / operations) * 1000).toFixed(1), cpu_ms: cpu }));
  }
} finally {
  await remove();
}
