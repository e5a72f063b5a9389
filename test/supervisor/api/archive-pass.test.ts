// One archival pass (supervisor/operations/archival.ts, docs/ARCHITECTURE.md
// §6.2 "Capacity and archival") against a scripted executor, kernel and
// request log: it pages the live ledger to its end, takes the request log's
// word for what it shows settled on this executor, asks the kernel only
// about the other entries that could leave, and sends to `archive` only the
// ones settled on this executor — never one the kernel has not settled, nor
// one settled on another executor — counting why it kept every other.
import { expect } from 'chai';
import { CustodyError } from '../../../shared/errors.js';
import type { ChildHandle } from '../../../supervisor/children/child-handle.js';
import { ARCHIVE_MOVE, ARCHIVE_PAUSE_FACTOR, ARCHIVE_PAUSE_MAX_MS, ARCHIVE_PAUSE_MS, Archival } from '../../../supervisor/operations/archival.js';
import type { OperationContext } from '../../../supervisor/operations/context.js';
import type { RequestRow } from '../../../supervisor/store/supervisor-store.js';

const id = (n: number) => n.toString(16).padStart(64, '0');

describe('supervisor: an archival pass over a live ledger', () => {
  it('sends archive only what the kernel settled on this executor, after paging the whole live ledger', async () => {
    // The live ledger, two pages: waiting entries, and entries that could leave in every kernel state.
    const pages = [
      {
        claims: [
          { operation_id: id(1), waiting: null },
          { operation_id: id(2), waiting: 'window_open' as const },
          { operation_id: id(3), waiting: null },
        ],
        next: 7,
        live: 7,
      },
      {
        claims: [
          { operation_id: id(4), waiting: 'no_report' as const },
          { operation_id: id(5), waiting: null },
          { operation_id: id(6), waiting: null },
          { operation_id: id(7), waiting: null },
        ],
        next: null,
        live: 6,
      },
    ];
    const kernelStates: Record<string, { state: string; executor_id: string }> = {
      [id(1)]: { state: 'completed', executor_id: 'exec-a' },
      [id(3)]: { state: 'awaiting_report', executor_id: 'exec-a' },
      [id(5)]: { state: 'unknown', executor_id: 'exec-a' },
      [id(6)]: { state: 'released', executor_id: 'exec-a' },
      [id(7)]: { state: 'completed', executor_id: 'exec-b' },
    };
    const asked: string[] = [];
    const sent: string[][] = [];
    const pageAfter: number[] = [];
    const executor = {
      request: (kind: string, body: Record<string, unknown>) => {
        if (kind === 'ledger.live') {
          pageAfter.push(body.after as number);
          return Promise.resolve(pages[pageAfter.length - 1]);
        }
        if (kind === 'archive') {
          sent.push(body.settled as string[]);
          return Promise.resolve({ archived: (body.settled as string[]).length, live: 5, not_archived: [] });
        }
        return Promise.reject(new Error(`unexpected ${kind}`));
      },
    };
    // The request log: 8 settled here (never asked), 9 settled on another executor and 10 still reported (both asked).
    pages[1]!.claims.push({ operation_id: id(8), waiting: null }, { operation_id: id(9), waiting: null }, { operation_id: id(10), waiting: null });
    const rows: Record<string, Partial<RequestRow>> = {
      [id(8)]: { phase: 'settled', outcome: 'completed', executor: 'exec-a' },
      [id(9)]: { phase: 'settled', outcome: 'completed', executor: 'exec-b' },
      [id(10)]: { phase: 'reported', outcome: null, executor: 'exec-a' },
    };
    kernelStates[id(9)] = { state: 'completed', executor_id: 'exec-b' };
    kernelStates[id(10)] = { state: 'awaiting_report', executor_id: 'exec-a' };
    const ctx = {
      store: {
        getPin: (name: string) => (name === 'default' ? { identity_id: 'exec-a' } : undefined),
        endOf: (operationId: string) => rows[operationId] as RequestRow | undefined,
      },
      kernel: {
        request: (kind: string, body: { operation_id: string }) => {
          expect(kind).to.equal('operation.get');
          asked.push(body.operation_id);
          const known = kernelStates[body.operation_id];
          return Promise.resolve({ operation: known ? { operation_id: body.operation_id, ...known } : null, receipts: [] });
        },
      },
    } as unknown as OperationContext;

    // An executor that cannot be asked, passed first: the others are passed all the same, then its failure is the answer.
    const failed = { request: () => Promise.reject(new CustodyError('executor_unavailable', 'executor first is failed')) };
    const warned: Array<Record<string, unknown>> = [];
    Object.assign(ctx, { log: { warn: (event: string, fields: Record<string, unknown>) => warned.push({ event, ...fields }) }, signal: new AbortController().signal });
    const both = new Archival(ctx, new Map([['first', failed as unknown as ChildHandle], ['default', executor as unknown as ChildHandle]]));
    const refusal = await both.pass().catch((error: unknown) => error);
    expect(refusal).to.have.property('code', 'executor_unavailable');
    expect(warned).to.deep.equal([{ event: 'archive_pass_failed', executor: 'first', code: 'executor_unavailable', message: 'executor first is failed' }]);
    expect(sent.flat().sort(), 'the executor after the failed one was passed').to.deep.equal([id(1), id(6), id(8)]);
    sent.length = 0;
    asked.length = 0;
    pageAfter.length = 0;

    const answer = await new Archival(ctx, new Map([['default', executor as unknown as ChildHandle]])).pass();
    expect(pageAfter, 'every page, each after the last one').to.deep.equal([0, 7]);
    expect(asked.sort(), 'the kernel is asked only about entries that could leave and the log does not show settled here').to.deep.equal([id(1), id(10), id(3), id(5), id(6), id(7), id(9)].sort());
    expect(sent.flat().sort(), 'only what was settled on this executor').to.deep.equal([id(1), id(6), id(8)]);
    expect(answer).to.deep.equal([{ executor: 'default', archived: 3, live: 5, kept: { window_open: 1, no_report: 1, not_settled: 5 } }]);
  });

  /** One pass over `executor`, its request log showing every operation settled on it. */
  function passOver(executor: { request: (kind: string, body: Record<string, unknown>) => Promise<unknown> }) {
    const ctx = {
      store: { getPin: () => ({ identity_id: 'exec-a' }), endOf: () => ({ phase: 'settled', outcome: 'completed', executor: 'exec-a' }) },
      kernel: { request: () => Promise.reject(new Error('the log settles every one')) },
      log: { warn: () => undefined },
      signal: new AbortController().signal,
    } as unknown as OperationContext;
    return new Archival(ctx, new Map([['default', executor as unknown as ChildHandle]])).pass();
  }

  it('moves 50 an exchange and pauses three times an exchange, 10 ms to 1 s (the pacing PERFORMANCE.md measured)', () => {
    expect([ARCHIVE_MOVE, ARCHIVE_PAUSE_MS, ARCHIVE_PAUSE_FACTOR, ARCHIVE_PAUSE_MAX_MS]).to.deep.equal([50, 10, 3, 1000]);
  });

  it('moves a page a few at a time, pausing between, so the executions waiting on the executor run between exchanges', async () => {
    const claims = Array.from({ length: 2 * ARCHIVE_MOVE + 7 }, (_, n) => ({ operation_id: id(100 + n), waiting: null }));
    const sent: number[] = [];
    const at: number[] = [];
    const executor = {
      request: (kind: string, body: Record<string, unknown>) => {
        if (kind === 'ledger.live') return Promise.resolve({ claims, next: null, live: claims.length });
        sent.push((body.settled as string[]).length);
        at.push(performance.now());
        return Promise.resolve({ archived: (body.settled as string[]).length, live: 0, not_archived: [] });
      },
    };
    const [pass] = await passOver(executor);
    expect(pass!.archived).to.equal(claims.length);
    expect(sent, 'three exchanges, none over ARCHIVE_MOVE').to.deep.equal([ARCHIVE_MOVE, ARCHIVE_MOVE, 7]);
    for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!, 'a pause between exchanges').to.be.at.least(ARCHIVE_PAUSE_MS - 1);
  });

  /** A pass over `count` settled operations on an executor that takes `exchangeMs` to answer each archive exchange: when each was sent and answered. */
  async function slowPass(count: number, exchangeMs: number) {
    const claims = Array.from({ length: count }, (_, n) => ({ operation_id: id(300 + n), waiting: null }));
    const exchanges: Array<{ sent: number; answered: number }> = [];
    const executor = {
      request: async (kind: string, body: Record<string, unknown>) => {
        if (kind === 'ledger.live') return { claims, next: null, live: claims.length };
        const sent = performance.now();
        // An executor busy with executions (or stalled): each exchange takes exchangeMs to answer.
        await new Promise((resolve) => setTimeout(resolve, exchangeMs));
        exchanges.push({ sent, answered: performance.now() });
        return { archived: (body.settled as string[]).length, live: 0, not_archived: [] };
      },
    };
    const [pass] = await passOver(executor);
    expect(pass!.archived).to.equal(count);
    return { exchanges, ended: performance.now() };
  }

  it('pauses after an exchange ARCHIVE_PAUSE_FACTOR times as long as the exchange took, so a slow executor is left more time to itself', async () => {
    const { exchanges } = await slowPass(3 * ARCHIVE_MOVE, 40);
    expect(exchanges).to.have.length(3);
    for (let i = 1; i < exchanges.length; i++) {
      const took = exchanges[i - 1]!.answered - exchanges[i - 1]!.sent;
      const paused = exchanges[i]!.sent - exchanges[i - 1]!.answered;
      // With the fixed ARCHIVE_PAUSE_MS alone the next exchange left 10 ms after an answer that took 40.
      expect(paused, `the pause after exchange ${i} (which took ${took.toFixed(1)} ms)`).to.be.at.least(3 * took - 2);
    }
  });

  it('pauses ARCHIVE_PAUSE_MAX_MS at most after an exchange that took long, and not after the last, so POST /v1/archive waits on no pause it need not', async () => {
    const { exchanges, ended } = await slowPass(ARCHIVE_MOVE + 1, 500);
    expect(exchanges).to.have.length(2);
    const paused = exchanges[1]!.sent - exchanges[0]!.answered;
    expect(paused).to.be.at.least(ARCHIVE_PAUSE_MAX_MS - 2);
    // Three times the exchange would be 1,500 ms.
    expect(paused).to.be.below(ARCHIVE_PAUSE_MAX_MS + 400);
    // A pause after the last exchange would end the pass a second after its answer.
    expect(ended - exchanges[1]!.answered, 'the pass ends with its last answer').to.be.below(500);
  });

  it('pauses after every exchange of a page the ledger has more after, and not after the last of the last page', async () => {
    const first = Array.from({ length: ARCHIVE_MOVE }, (_, n) => ({ operation_id: id(500 + n), waiting: null }));
    const second = Array.from({ length: 2 * ARCHIVE_MOVE }, (_, n) => ({ operation_id: id(600 + n), waiting: null }));
    const events: Array<{ what: string; at: number }> = [];
    const executor = {
      request: async (kind: string, body: Record<string, unknown>) => {
        if (kind === 'ledger.live') {
          events.push({ what: 'page', at: performance.now() });
          return body.after === 0 ? { claims: first, next: 1, live: 3 * ARCHIVE_MOVE } : { claims: second, next: null, live: 2 * ARCHIVE_MOVE };
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
        events.push({ what: 'answered', at: performance.now() });
        return { archived: (body.settled as string[]).length, live: 0, not_archived: [] };
      },
    };
    const [pass] = await passOver(executor);
    const ended = performance.now();
    expect(pass!.archived).to.equal(3 * ARCHIVE_MOVE);
    expect(events.map((event) => event.what)).to.deep.equal(['page', 'answered', 'page', 'answered', 'answered']);
    // The first page's only exchange is not the pass's last: the pause (3 x ~50 ms) comes before the next page is read.
    expect(events[2]!.at - events[1]!.at, 'a pause before the next page').to.be.at.least(148);
    // Between the second page's two exchanges: the pause, then the second exchange's own 50 ms.
    expect(events[4]!.at - events[3]!.at, 'a pause between the second page\'s exchanges').to.be.at.least(198);
    expect(ended - events[4]!.at, 'none after the last (it would be 150 ms)').to.be.below(120);
  });
});
