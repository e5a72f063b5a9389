// The pool's choice and its bounded wait, on fake children whose state the
// test sets: fast and exact, no processes.
import { expect } from 'chai';
import type { ChildState } from '../../../supervisor/children/child-handle.js';
import { ExecutorPool } from '../../../supervisor/children/pool.js';
import { refused } from '../../helpers/codes.js';

class FakeChild {
  constructor(
    readonly name: string,
    public state: ChildState = 'running',
  ) {}
}

function poolOf(states: Record<string, ChildState>, waitMs = 0, tools: Record<string, string[]> = {}) {
  const children = Object.fromEntries(Object.entries(states).map(([name, state]) => [name, new FakeChild(name, state)]));
  const pool = new ExecutorPool(
    Object.keys(states).map((name) => ({ name, identityId: `id-${name}`, tools: tools[name] ?? ['notes/*'], child: children[name]! })),
    () => waitMs,
  );
  return { pool, children };
}


describe('supervisor/children/pool: routing a new operation', () => {
  it('routes to the running candidate with the fewest operations in flight', () => {
    const { pool } = poolOf({ a: 'running', b: 'running', c: 'running' });
    pool.track('r1', 'id-a', true);
    pool.track('r2', 'id-a', true);
    pool.track('r3', 'id-b', true);
    expect(pool.choose('notes/x')!.name).to.equal('c');
  });

  it('breaks ties by fewest routed so far, then by name, so one-at-a-time calls spread', () => {
    const { pool } = poolOf({ b: 'running', a: 'running' });
    const sequence: string[] = [];
    for (let i = 0; i < 6; i++) {
      const chosen = pool.choose('notes/x')!;
      sequence.push(chosen.name);
      pool.track(`r${i}`, chosen.identityId, true);
      pool.release(`r${i}`, true);
    }
    expect(sequence).to.deep.equal(['a', 'b', 'a', 'b', 'a', 'b']);
    expect(pool.counts('a')).to.deep.equal({ in_flight: 0, completed: 3, routed: 3 });
  });

  const notRunning: ChildState[] = ['failed', 'backoff', 'starting', 'stopping', 'stopped'];
  for (const state of notRunning) {
    it(`never routes to a ${state} candidate, even when it has the fewest in flight`, () => {
      const { pool } = poolOf({ a: state, b: 'running' });
      pool.track('r1', 'id-b', true);
      pool.track('r2', 'id-b', true);
      expect(pool.choose('notes/x')!.name).to.equal('b');
    });
  }

  it('only counts executors whose tool patterns cover the tool', () => {
    const { pool } = poolOf({ a: 'running', b: 'running' }, 0, { a: ['other/*'] });
    expect(pool.candidates('notes/x').map((m) => m.name)).to.deep.equal(['b']);
    expect(pool.choose('other/y')!.name).to.equal('a');
  });

  it('counts a request once however often it is tracked, and moves it when it is tracked on another executor', () => {
    const { pool } = poolOf({ a: 'running', b: 'running' });
    pool.track('r1', 'id-a', true);
    pool.track('r1', 'id-a');
    expect(pool.counts('a').in_flight).to.equal(1);
    pool.track('r1', 'id-b');
    expect([pool.counts('a').in_flight, pool.counts('b').in_flight]).to.deep.equal([0, 1]);
    pool.release('r1', false);
    expect(pool.counts('b')).to.deep.equal({ in_flight: 0, completed: 0, routed: 0 });
  });
});

describe('supervisor/children/pool: when every candidate is down (timing.executor_wait_ms)', () => {
  it('refuses at once with executor_unavailable when the bound is 0, naming each candidate and its state', async () => {
    const { pool } = poolOf({ a: 'failed', b: 'backoff' }, 0);
    const failure = await refused(pool.pick('notes/x'));
    expect(failure.code).to.equal('executor_unavailable');
    expect(failure.message).to.contain('a failed').and.to.contain('b backoff').and.to.contain('timing.executor_wait_ms');
  });

  it('waits for a candidate that comes back within the bound and routes to it', async () => {
    const { pool, children } = poolOf({ a: 'failed', b: 'backoff' }, 2000);
    setTimeout(() => (children.b!.state = 'running'), 100);
    const started = Date.now();
    expect((await pool.pick('notes/x'))!.name).to.equal('b');
    expect(Date.now() - started).to.be.at.least(90).and.below(2000);
  });

  it('refuses once the bound has passed and no candidate came back in it', async () => {
    const { pool, children } = poolOf({ a: 'failed' }, 150);
    const late = setTimeout(() => (children.a!.state = 'running'), 1500);
    const started = Date.now();
    const failure = await refused(pool.pick('notes/x'));
    clearTimeout(late);
    expect(failure.code).to.equal('executor_unavailable');
    expect(Date.now() - started).to.be.at.least(150).and.below(1500);
  });

  it('leaves a tool no executor serves to the kernel (no wait, no choice)', async () => {
    const { pool } = poolOf({ a: 'failed' }, 5000);
    const started = Date.now();
    expect(await pool.pick('elsewhere/x')).to.equal(undefined);
    expect(Date.now() - started).to.be.below(1000);
  });
});
