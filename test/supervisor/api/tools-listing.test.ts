// GET /v1/tools (and so an MCP host's tools/list) with executors that cannot
// answer: each is asked at once, none waited for past a moment, so two
// executors down cost the listing one short wait, not two session timeouts
// in turn, and each is named unavailable beside the tools of the ones up.
import { expect } from 'chai';
import { until } from '../../helpers/eventually.js';
import { type TestService, startService } from '../../helpers/service.js';

describe('GET /v1/tools with executors down', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService({
      config: {
        executors: [{ name: 'up' }, { name: 'down-1' }, { name: 'down-2' }],
        // A killed executor waits 30 s before its restart: no session meanwhile, as one restarting or migrating a large ledger.
        restart: { max_restarts: 5, period_s: 60, backoff_initial_ms: 30_000, backoff_max_ms: 30_000, failed_cooldown_s: 3600 },
      },
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10, ttl_ms: 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const children = async () => (await service.http('GET', '/v1/status')).body.children as Array<{ name: string; state: string; pid: number | null }>;

  it('names each executor that is down as unavailable and lists the tools of the one up, within one short wait', async () => {
    for (const name of ['down-1', 'down-2']) process.kill((await children()).find((c) => c.name === name)!.pid!, 'SIGKILL');
    await until('both waiting to restart', async () => ((await children()).filter((c) => c.name.startsWith('down-') && c.state === 'backoff').length === 2 ? true : undefined));
    const started = Date.now();
    const listed = await service.http('GET', '/v1/tools', undefined, 'agent');
    const tookMs = Date.now() - started;
    expect(listed.status).to.equal(200);
    const body = listed.body as { tools: Array<{ tool: string; executor: string }>; unavailable: Array<{ executor: string }> };
    expect(body.unavailable.map((u) => u.executor)).to.deep.equal(['down-1', 'down-2']);
    expect(body.tools.map((t) => `${t.tool} ${t.executor}`)).to.include('review-notes/append up');
    // One session wait (2 s) for both at once, not the hello timeout (10 s here) for each in turn.
    expect(tookMs, `listed in ${tookMs} ms`).to.be.below(6_000);
  });
});
