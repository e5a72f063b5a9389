// The expiry sweep reads the store only once the earliest live nonce can have
// run out (kernel-proc/store/nonces-table.ts). That shortcut must never be
// late. A nonce minted after the wall clock stepped back is minted at the
// kernel's high-water mark (kernel.db schema version 11), so it never expires
// before the nonces minted ahead of it.
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

  it('mints a nonce after the clock stepped back at the high-water mark, never ahead of the nonces before it, and expires it once the clock passes it', async () => {
    // The grant's window opened at the start: stepping back stays inside it.
    root.advance(200_000);
    const older = await reserve('n-older');
    root.advance(-100_000);
    // Minted at max(clock, mark) (kernel.db schema version 11): it did expire 100 s sooner, at the clock stepped back.
    const newer = await reserve('n-newer');
    expect(newer).to.be.at.least(older).and.below(older + 5_000);
    // 100 s to catch up with the mark, then the nonce TTL.
    root.advance(100_000 + 110_000);
    expect(stateOf('n-newer')).to.equal('reserved');
    root.advance(15_000);
    await eventually(() => stateOf('n-older') === 'expired' && stateOf('n-newer') === 'expired', 5_000, 'both expired');
  });
});
