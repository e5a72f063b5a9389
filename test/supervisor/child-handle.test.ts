import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Signer, generateSeed } from '../../shared/crypto/ed25519.js';
import type { CustodyError } from '../../shared/errors.js';
import { HeadWitnessStore } from '../../supervisor/children/witness.js';
import { ChildHandle, type ChildSpec } from '../../supervisor/children/child-handle.js';
import { RestartIntensity } from '../../supervisor/children/restart-intensity.js';
import { restartPolicySchema, timingSchema } from '../../supervisor/config/schema.js';
import { SupervisorStore } from '../../supervisor/store/supervisor-store.js';
import { admitRequest, attributeCrash } from '../../supervisor/operations/quarantine.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { collectingLogger, distPath } from '../helpers/children.js';

describe('restart intensity', () => {
  const policy = restartPolicySchema.parse({ max_restarts: 3, period_s: 10, backoff_initial_ms: 100, backoff_max_ms: 350 });

  it('allows max_restarts within the period with doubling backoff, then refuses', () => {
    const intensity = new RestartIntensity(policy);
    expect(intensity.next(1000)).to.deep.equal({ restart: true, delayMs: 100 });
    expect(intensity.next(2000)).to.deep.equal({ restart: true, delayMs: 200 });
    expect(intensity.next(3000)).to.deep.equal({ restart: true, delayMs: 350 });
    const refused = intensity.next(4000);
    expect(refused.restart).to.equal(false);
  });

  it('forgets restarts older than the period', () => {
    const intensity = new RestartIntensity(policy);
    for (const at of [0, 1, 2]) intensity.next(at);
    expect(intensity.next(10_003)).to.deep.equal({ restart: true, delayMs: 100 });
  });
});

describe('child handle over the wire fixture', function () {
  this.timeout(30_000);
  let dir: string;
  let store: SupervisorStore;
  const seed = generateSeed();
  const pin = { id: 'fixture', publicKey: Signer.fromSeed(seed).publicKeyHex, keyEpoch: 1 };

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-child-'));
    store = SupervisorStore.provision(path.join(dir, 'supervisor'));
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function handle(
    options: {
      maxRestarts?: number;
      heartbeatMs?: number;
      settings?: Record<string, unknown>;
      onFailed?: (reason: CustodyError) => void;
      quarantine?: boolean;
    } = {},
  ) {
    const spec: ChildSpec = {
      name: 'fixture',
      role: 'kernel',
      storeDir: null,
      argv: [process.execPath, distPath('test', 'fixtures', 'wire-child.js')],
      settings: { seed: Buffer.from(seed).toString('hex'), ...options.settings },
      pins: { kernel: null },
      maxInFlight: 8,
    };
    return new ChildHandle(spec, {
      store,
      witness: new HeadWitnessStore(store),
      log: collectingLogger().log,
      limits: { maxFrameBytes: 1024 * 1024, maxDepth: 32 },
      timing: timingSchema.parse({ heartbeat_interval_ms: options.heartbeatMs ?? 60_000, heartbeat_timeout_ms: 300, hello_timeout_ms: 5000 }),
      restart: restartPolicySchema.parse({ max_restarts: options.maxRestarts ?? 5, period_s: 60, backoff_initial_ms: 10, backoff_max_ms: 50 }),
      pin: () => pin,
      onFailed: (_child, reason) => options.onFailed?.(reason),
      onStderrLine: () => undefined,
      ...(options.quarantine
        ? {
            admit: (requestId: string) => admitRequest(store, requestId),
            onCrash: (child: ChildHandle, requestIds: readonly string[], why: string) => attributeCrash(store, collectingLogger().log, child.name, requestIds, why, 2),
          }
        : {}),
    });
  }

  it('starts a child, records it, and restarts it with a fresh session after a kill -9', async () => {
    const child = handle();
    await child.start();
    const first = child.session!;
    expect(store.listChildren()[0]).to.include({ name: 'fixture', state: 'running', pid: first.pid, sid: first.sid });
    process.kill(first.pid, 'SIGKILL');
    await first.exited;
    const second = await child.waitForSession(5000);
    expect(second.pid).to.not.equal(first.pid);
    expect(second.sid).to.not.equal(first.sid);
    expect(child.restarts).to.equal(1);
    expect((await child.request('ping', {})).now).to.be.a('number');
    const incidents = store.recentIncidents(10).map((i) => i.kind);
    expect(incidents).to.include('child_exit');
    await child.stop(2000);
    expect(child.state).to.equal('stopped');
  });

  it('marks a child failed past its restart intensity', async () => {
    let failed: CustodyError | null = null;
    const child = handle({ maxRestarts: 2, onFailed: (reason) => (failed = reason) });
    await child.start();
    for (let i = 0; i < 3; i++) {
      const session = await child.waitForSession(5000);
      process.kill(session.pid, 'SIGKILL');
      await session.exited;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(child.state).to.equal('failed');
    expect(failed).to.have.property('code', 'child_failed');
    await child.waitForSession(100).then(
      () => expect.fail('a failed child has no session'),
      (error: unknown) => expect(error).to.have.property('code', 'child_failed'),
    );
    await child.stop(100);
  });

  it('kills and replaces a child that stops answering heartbeats', async () => {
    const child = handle({ heartbeatMs: 100 });
    await child.start();
    const hung = child.session!;
    process.kill(hung.pid, 'SIGSTOP');
    const exit = await hung.exited;
    expect(exit.signal).to.equal('SIGKILL');
    const fresh = await child.waitForSession(5000);
    expect(fresh.pid).to.not.equal(hung.pid);
    expect(store.recentIncidents(10).map((i) => i.kind)).to.include('heartbeat_missed');
    await child.stop(2000);
  });

  it('fails a child whose hello proves another identity, without restarting it', async () => {
    let failed: CustodyError | null = null;
    const child = handle({ settings: { seed: Buffer.from(generateSeed()).toString('hex') }, onFailed: (reason) => (failed = reason) });
    const error = await child.start().then(() => null, (e: unknown) => e);
    expect(error).to.have.property('code', 'identity_mismatch');
    expect(child.state).to.equal('failed');
    expect(failed).to.have.property('code', 'identity_mismatch');
    expect(store.recentIncidents(10).map((i) => i.kind)).to.include.members(['start_failed', 'child_failed']);
  });

  it('kills a child whose channel is poisoned, records the cause, and restarts it with a fresh session', async () => {
    const child = handle();
    await child.start();
    const first = child.session!;
    const answer = await child.request('echo', { misbehave: 'garbage' }).then(() => null, (e: unknown) => e);
    expect(answer).to.have.property('code', 'frame_malformed');
    expect(await first.exited).to.have.property('signal', 'SIGKILL');
    const second = await child.waitForSession(5000);
    expect(second.sid).to.not.equal(first.sid);
    const poisoned = store.recentIncidents(10).find((i) => i.kind === 'channel_poisoned');
    expect(poisoned).to.include({ code: 'frame_malformed', child: 'fixture' });
    await child.stop(2000);
  });

  it('attributes a poisoning to the request in flight, quarantines it at the second, restarts uncounted and never sends it again', async () => {
    let failed: CustodyError | null = null;
    // One counted restart allowed: without quarantine the second poisoning fails the child.
    const child = handle({ maxRestarts: 1, quarantine: true, onFailed: (reason) => (failed = reason) });
    store.logRequest({ request_id: 'pill', operation_id: operationIdFor('pill'), kind: 'invoke', tool: 't/x', subject: 'a', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });
    await child.start();
    for (let crash = 1; crash <= 2; crash++) {
      const session = await child.waitForSession(5000);
      const answer = await child.request('echo', { misbehave: 'garbage' }, { requestId: 'pill' }).then(() => null, (e: unknown) => e);
      expect(answer).to.have.property('code', 'frame_malformed');
      await session.exited;
    }
    const fresh = await child.waitForSession(5000);
    expect(failed).to.equal(null);
    expect(child.state).to.equal('running');
    expect(store.getRequest('pill')!.phase).to.equal('quarantined');
    expect(store.incidentsFor(operationIdFor('pill')).map((i) => i.kind)).to.deep.equal(['request_crash', 'request_crash', 'quarantined']);
    // Refused before it reaches the channel: the same process answers what comes next.
    const again = await child.request('echo', { misbehave: 'garbage' }, { requestId: 'pill' }).then(() => null, (e: unknown) => e);
    expect(again).to.have.property('code', 'request_quarantined');
    expect((await child.request('ping', {})).now).to.be.a('number');
    expect(child.session!.pid).to.equal(fresh.pid);
    await child.stop(2000);
  });

  it('stops gracefully with shutdown, and the child exits 0', async () => {
    const child = handle();
    await child.start();
    const session = child.session!;
    await child.stop(2000);
    expect(await session.exited).to.deep.equal({ code: 0, signal: null });
  });
});
