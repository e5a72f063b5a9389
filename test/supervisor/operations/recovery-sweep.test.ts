// The recovery sweep looks at bounds.recovery_sweep_operations operations in
// doubt at a time, oldest first (supervisor/operations/recovery.ts). Old
// operations nobody can move must not hide newer ones from every sweep: the
// next sweep goes on after the last one the previous sweep looked at. Here
// three authorized walks the operator still holds (their windows open, so
// the sweep leaves them be) are older than one whose window has passed, and
// a sweep looks at two: only by going on does a sweep reach the fourth and
// close it without effect.
import { expect } from 'chai';
import type { OperationKey, OperationView } from '../../../shared/protocol/kernel-messages.js';
import type { OperationContext } from '../../../supervisor/operations/context.js';
import type { OperationDriver } from '../../../supervisor/operations/driver.js';
import { RecoverySweeper } from '../../../supervisor/operations/recovery.js';
import { until } from '../../helpers/eventually.js';
import { type TestService, startService } from '../../helpers/service.js';

describe('the recovery sweep, going on where the last stopped', () => {
  it('starts each sweep after the last one\'s last operation, starts again from the oldest after the newest, and says a waiting operation once', async () => {
    // Five operations in doubt, oldest first, each waiting for an executor the service does not have (failed).
    const doubt = Array.from({ length: 5 }, (_, n) => ({ operation_id: String(n + 1).repeat(64), request_id: `op-${n + 1}`, created_at: 1000 + n, state: 'dispatch_committed', executor_id: 'gone', window: null }) as unknown as OperationView);
    const firstAfter: Array<OperationKey | null> = [];
    const listed: string[][] = [];
    const asked: number[][] = [];
    const incidents: string[] = [];
    let first = true;
    const ctx = {
      config: { bounds: { recovery_sweep_operations: 2 }, timing: { kernel_request_ms: 1000 } },
      signal: new AbortController().signal,
      log: { debug: () => undefined, warn: () => undefined },
      executorById: () => {
        throw new Error('no such executor');
      },
      store: { getRequestByOperation: () => undefined, recordIncident: (incident: { operation_id: string }) => incidents.push(incident.operation_id), requestsBeforeOrAfterKernel: () => [] },
      kernel: {
        request: (kind: string, body: { limit: number; after: OperationKey | null }) => {
          expect(kind).to.equal('recover');
          if (first) firstAfter.push(body.after);
          first = false;
          asked.at(-1)!.push(body.limit);
          const rest = doubt.filter((op) => body.after === null || op.created_at > body.after.created_at);
          // One operation a page, as a kernel whose frame holds one view answers: a sweep reads several pages.
          const page = rest.slice(0, 1);
          listed.at(-1)!.push(...page.map((op) => op.request_id));
          const last = page.at(-1);
          return Promise.resolve({ operations: page, now: 2000, next_after: rest.length > page.length && last ? { created_at: last.created_at, operation_id: last.operation_id } : null });
        },
      },
    } as unknown as OperationContext;
    const sweeper = new RecoverySweeper(ctx, {} as OperationDriver);
    for (let sweep = 0; sweep < 6; sweep++) {
      first = true;
      listed.push([]);
      asked.push([]);
      await sweeper.sweep();
    }
    const key = (n: number) => ({ created_at: 1000 + n - 1, operation_id: String(n).repeat(64) });
    expect(firstAfter).to.deep.equal([null, key(2), key(4), null, key(2), key(4)]);
    expect(listed).to.deep.equal([['op-1', 'op-2'], ['op-3', 'op-4'], ['op-5'], ['op-1', 'op-2'], ['op-3', 'op-4'], ['op-5']]);
    // Two pages a sweep up to the bound (2, then what is left of it), one where the listing ends.
    expect(asked).to.deep.equal([[2, 1], [2, 1], [2], [2, 1], [2, 1], [2]]);
    // Each waiting operation is said once over two rounds: its mark outlives the sweeps that do not list it.
    expect(incidents.sort()).to.deep.equal(doubt.map((op) => op.operation_id).sort());
  });
});

describe('the recovery sweep, bounded', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: { bounds: { recovery_sweep_operations: 2 }, timing: { recovery_sweep_ms: 300 } } });
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const kernelState = async (name: string) => ((await service.http('GET', `/v1/operations/${name}`, undefined, 'agent')).body.kernel as { state: string; window: { expires_at: number } | null } | null);
  const authorize = async (operation: string) => {
    const answer = await service.http('POST', '/v1/authorize', { tool: 'review-notes/append', arguments: { note: operation }, operation });
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
  };

  it('reaches an operation past the first bound-many in doubt, and settles it once its window passes', async () => {
    // A long grant for the held walks: their windows outlast the test.
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10, ttl_ms: 600_000 })).status).to.equal(201);
    for (const name of ['held-1', 'held-2', 'held-3']) await authorize(name);
    // The newest grant, short: the last walk's window ends with it (a window never outlasts its grant).
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 1, ttl_ms: 2_000 })).status).to.equal(201);
    await authorize('lapsed');
    const lapsed = (await kernelState('lapsed'))!;
    expect(lapsed.state).to.equal('dispatch_committed');
    expect(lapsed.window!.expires_at - Date.now(), 'a short window').to.be.below(2_500);

    // Past its window, a sweep asks the executor (nothing claimed) and the kernel releases its hold.
    await until('the lapsed walk closed', async () => ((await kernelState('lapsed'))?.state === 'released' ? true : undefined), 20_000);
    for (const name of ['held-1', 'held-2', 'held-3']) expect((await kernelState(name))?.state, `${name} still the operator's`).to.equal('dispatch_committed');
  });
});

describe('the recovery sweep, carrying on a request the kernel does not list', () => {
  it('drives it again only after its backoff, across sweeps, while its drive keeps failing; an operator\'s walk and a request on a failed executor are left alone', async () => {
    const rows = [
      { request_id: 'never-reserved', operation_id: 'a'.repeat(64), kind: 'invoke', phase: 'received', executor: null },
      { request_id: 'operators-walk', operation_id: 'b'.repeat(64), kind: 'authorize', phase: 'received', executor: null },
      { request_id: 'on-a-failed-executor', operation_id: 'c'.repeat(64), kind: 'invoke', phase: 'reported', executor: 'failed-one' },
    ];
    const drives: string[] = [];
    const ctx = {
      config: { bounds: { recovery_sweep_operations: 10 }, timing: { kernel_request_ms: 1000, retry_backoff_initial_ms: 200, retry_backoff_max_ms: 10_000 } },
      signal: new AbortController().signal,
      log: { debug: () => undefined, info: () => undefined, warn: () => undefined },
      executorById: () => ({ state: 'failed', name: 'failed-one' }),
      store: { getRequestByOperation: () => undefined, recordIncident: () => undefined, requestsBeforeOrAfterKernel: () => rows },
      kernel: { request: () => Promise.resolve({ operations: [], now: 2000, next_after: null }) },
    } as unknown as OperationContext;
    const driver = {
      isDriving: () => false,
      drive: (requestId: string) => {
        drives.push(requestId);
        return Promise.reject(new Error('kernel.db is locked'));
      },
    } as unknown as OperationDriver;
    const sweeper = new RecoverySweeper(ctx, driver);
    // Ten sweeps 50 ms apart (500 ms): a failing drive waits 200 ms, then 400, then 800 before the next.
    for (let sweep = 0; sweep < 10; sweep++) {
      await sweeper.sweep();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(drives.every((id) => id === 'never-reserved'), drives.join(', ')).to.equal(true);
    expect(drives.length, 'backed off, not driven every sweep').to.be.within(2, 3);
  });
});
