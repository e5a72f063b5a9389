// The kernel takes as many requests at once as the supervisor's channel may
// send it (bounds.kernel_max_in_flight, 256 by default): a lower bound of its
// own answered the 65th concurrent request too_many_in_flight, and the
// supervisor waits a backoff before asking again.
import { expect } from 'chai';
import { KernelProcess, KernelRoot, pinBody, reserveBody, testExecutor } from './helpers.js';

describe('kernel-proc: requests in flight', function () {
  this.timeout(30_000);
  const root = new KernelRoot();
  let kernel: KernelProcess;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(testExecutor(21)));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('answers 256 reserves sent at once, none refused as too many in flight', async () => {
    const answers = await Promise.allSettled(Array.from({ length: 256 }, (_, i) => kernel.request('reserve', reserveBody(`flight-${i}`))));
    const refusals = answers.filter((answer) => answer.status === 'rejected').map((answer) => String((answer).reason));
    expect(refusals).to.deep.equal([]);
    expect(answers.filter((answer) => answer.status === 'fulfilled')).to.have.length(256);
  });
});
