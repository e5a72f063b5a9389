// The recovery sweep looks at bounds.recovery_sweep_operations operations in
// doubt at a time, oldest first (supervisor/operations/recovery.ts). Old
// operations nobody can move must not hide newer ones from every sweep: the
// next sweep goes on after the last one the previous sweep looked at. Here
// three authorized walks the operator still holds (their windows open, so
// the sweep leaves them be) are older than one whose window has passed, and
// a sweep looks at two: only by going on does a sweep reach the fourth and
// close it without effect.
import { expect } from 'chai';
import { until } from '../../helpers/eventually.js';
import { type TestService, startService } from '../../helpers/service.js';

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
