// Under load the service waits on its stop signal in many places at once
// (room on an executor, the wait between retries). Each wait used to add its
// own 'abort' listener, and Node warned at eleven
// (MaxListenersExceededWarning). Forty requests queued behind one executor
// slot provoke it; the service's stderr must not carry the warning.
import { expect } from 'chai';
import { type TestService, startService } from '../helpers/service.js';

describe('supervisor: abort listeners under load', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: { executors: [{ name: 'default', max_in_flight: 1 }] } });
    const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 1000, ttl_ms: 3_600_000 });
    expect(grant.status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('queues forty requests behind one executor slot without a MaxListenersExceededWarning, and completes them all', async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, index) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: `queued ${index}` } }, 'agent')),
    );
    expect(answers.map((answer) => answer.body.outcome)).to.deep.equal(Array.from({ length: 40 }, () => 'completed'));
    expect(service.stderr.join('\n')).to.not.include('MaxListenersExceededWarning');
  });
});
