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

  it('expires the older of two live nonces on its own time, not when the newer one runs out', async () => {
    const first = await kernel.request('reserve', reserveBody('n-first', { capability_id: grant }));
    root.advance(10_000);
    const second = await kernel.request('reserve', reserveBody('n-second', { capability_id: grant }));
    expect(first.nonce!.expires_at).to.be.below(second.nonce!.expires_at);
    // Past the first nonce's expiry, before the second's.
    root.advance(115_000);
    await eventually(() => stateOf('n-first') === 'expired', 5_000, 'the first reservation expired');
    expect(stateOf('n-second')).to.equal('reserved');
    root.advance(10_000);
    await eventually(() => stateOf('n-second') === 'expired', 5_000, 'the second reservation expired');
  });

  it('expires a nonce minted after the clock stepped back on its own time, ahead of an older nonce that expires later', async () => {
    // The grant's window opened at the start: stepping back stays inside it.
    root.advance(200_000);
    const older = await kernel.request('reserve', reserveBody('n-older', { capability_id: grant }));
    root.advance(-100_000);
    const newer = await kernel.request('reserve', reserveBody('n-newer', { capability_id: grant }));
    expect(newer.nonce!.expires_at).to.be.below(older.nonce!.expires_at);
    // Past the newer nonce's expiry, before the older one's: only the timer's sweep can find it.
    root.advance(130_000);
    await eventually(() => stateOf('n-newer') === 'expired', 5_000, 'the newer reservation expired');
    expect(stateOf('n-older')).to.equal('reserved');
    root.advance(90_000);
    await eventually(() => stateOf('n-older') === 'expired', 5_000, 'the older reservation expired');
  });
});
