// Archival on its own (supervisor/operations/archival.ts): a live ledger
// holds claim_capacity claims, and with nobody archiving a service refuses
// every execute with ledger_full once it has run that many operations. Here
// the ledger holds 24 (3 kept for refusals), the window is short, and the
// service archives every 300 ms: three ledgers full of operations all
// complete, and no one called custody archive.
import { expect } from 'chai';
import path from 'node:path';
import { type TestService, sqlite, startService } from '../helpers/service.js';

const CAPACITY = 24;
/** min(1024, max(1, ⌊capacity / 8⌋)): the share only refusals may use. */
const RESERVE = 3;
const USABLE = CAPACITY - RESERVE;

describe('archival every timing.archive_interval_ms', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    service = await startService({
      config: {
        executors: [{ name: 'default', tools: ['review-notes/*'], claim_capacity: CAPACITY }],
        kernel: { settings: { execution_window_ms: 500 } },
        timing: { archive_interval_ms: 300 },
      },
    });
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 1000, ttl_ms: 3_600_000 })).status).to.equal(201);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('makes room in a small ledger on its own: three ledgers full of operations all complete', async () => {
    const ledger = path.join(service.paths.executorDir('default'), 'ledger.db');
    const archive = path.join(service.paths.executorDir('default'), 'archive.db');
    const count = async (db: string, sql: string) => (await sqlite(db, sql))[0]!.n as number;
    expect(await sqlite(ledger, 'SELECT claim_capacity, refusal_reserve FROM config'), 'the ledger is as small as configured').to.deep.equal([{ claim_capacity: CAPACITY, refusal_reserve: RESERVE }]);
    const outcomes: Record<string, number> = {};
    for (let batch = 0; batch < 3; batch++) {
      // A ledger's worth of claims, four at a time: the ledger is full after each batch.
      for (let i = 0; i < USABLE; i += 4) {
        const answers = await Promise.all(
          Array.from({ length: Math.min(4, USABLE - i) }, (_, k) => `auto-${batch}-${i + k}`).map((id) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: id }, request_id: id })),
        );
        for (const { body } of answers) {
          const outcome = String((body as { outcome?: unknown }).outcome ?? (body as { code?: unknown }).code);
          outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        }
      }
      // Nobody calls custody archive: the timer empties the ledger once the windows have passed.
      const deadline = Date.now() + 20_000;
      while ((await count(ledger, 'SELECT count(*) AS n FROM claims')) > 0) {
        if (Date.now() > deadline) throw new Error(`batch ${batch}: the ledger still holds ${await count(ledger, 'SELECT count(*) AS n FROM claims')} claims`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    expect(outcomes).to.deep.equal({ completed: 3 * USABLE });
    expect(await count(archive, 'SELECT count(*) AS n FROM archived_claims_view')).to.equal(3 * USABLE);
    const passes = service.stderr.map((line) => JSON.parse(line) as Record<string, unknown>).filter((record) => record.event === 'archived' && record.component === 'supervisor');
    expect(passes.reduce((sum, record) => sum + Number(record.archived), 0), 'each archived claim is in a logged pass').to.equal(3 * USABLE);
  });
});
