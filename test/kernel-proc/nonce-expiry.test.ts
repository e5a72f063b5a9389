// The expiry sweep reads the store only once the earliest live nonce can have
// run out (kernel-proc/store/nonces-table.ts). That shortcut must never be
// late: a nonce minted after the wall clock stepped back expires before the
// nonces minted ahead of it, and the sweep has to find it on its own time.
import { expect } from 'chai';
import { KernelProcess, KernelRoot, TOOL, grantBody, pinBody, reserveBody, testExecutor } from './helpers.js';
import { eventually } from '../helpers/eventually.js';

describe('kernel-proc: nonce expiry sweep', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  let kernel: KernelProcess;
  let grant: string;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision', settings: { sweep_interval_ms: 20, nonce_ttl_ms: 120_000 } });
    await kernel.request('executor.pin', pinBody(testExecutor(71)));
    grant = (await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 100 }))).capability_id;
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  const stateOf = (requestId: string) => root.read<{ state: string }>('SELECT state FROM operations WHERE request_id = ?', requestId)[0]?.state;
  const reserve = async (requestId: string) => (await kernel.request('reserve', reserveBody(requestId, { capability_id: grant }))).nonce!.expires_at;

  /** With the clock `between` ms on, only `sooner` has run out and the timer's sweep must find it; `later` after `rest` more. */
  async function expiresInTurn(sooner: string, later: string, between: number, rest: number): Promise<void> {
    root.advance(between);
    await eventually(() => stateOf(sooner) === 'expired', 5_000, `${sooner} expired`);
    expect(stateOf(later)).to.equal('reserved');
    root.advance(rest);
    await eventually(() => stateOf(later) === 'expired', 5_000, `${later} expired`);
  }

  it('expires the older of two live nonces on its own time, not when the newer one runs out', async () => {
    const first = await reserve('n-first');
    root.advance(10_000);
    expect(first).to.be.below(await reserve('n-second'));
    await expiresInTurn('n-first', 'n-second', 115_000, 10_000);
  });

  it('expires a nonce minted after the clock stepped back on its own time, ahead of an older nonce that expires later', async () => {
    // The grant's window opened at the start: stepping back stays inside it.
    root.advance(200_000);
    const older = await reserve('n-older');
    root.advance(-100_000);
    expect(await reserve('n-newer')).to.be.below(older);
    await expiresInTurn('n-newer', 'n-older', 130_000, 90_000);
  });
});
