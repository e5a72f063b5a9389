// One archival pass (supervisor/api/handlers.ts archive, docs/ARCHITECTURE.md
// §6.2 "Capacity and archival") against a scripted executor and kernel: it
// pages the live ledger to its end, asks the kernel only about entries that
// could leave, and sends to `archive` only the ones the kernel settled on
// this executor — never one the kernel has not settled, nor one it settled
// on another executor — counting why it kept every other.
import { expect } from 'chai';
import { archive } from '../../../supervisor/api/handlers.js';
import type { Service } from '../../../supervisor/service.js';

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
    const service = {
      executors: new Map([['default', executor]]),
      store: { getPin: (name: string) => (name === 'default' ? { identity_id: 'exec-a' } : undefined) },
      kernel: {
        request: (kind: string, body: { operation_id: string }) => {
          expect(kind).to.equal('operation.get');
          asked.push(body.operation_id);
          const known = kernelStates[body.operation_id];
          return Promise.resolve({ operation: known ? { operation_id: body.operation_id, ...known } : null, receipts: [] });
        },
      },
    } as unknown as Service;

    const answer = await archive(service);
    expect(pageAfter, 'every page, each after the last one').to.deep.equal([0, 7]);
    expect(asked.sort(), 'the kernel is asked only about entries that could leave').to.deep.equal([id(1), id(3), id(5), id(6), id(7)]);
    expect(sent.flat().sort(), 'only what the kernel settled on this executor').to.deep.equal([id(1), id(6)]);
    expect(answer.body).to.deep.equal({
      executors: [{ executor: 'default', archived: 2, live: 5, kept: { window_open: 1, no_report: 1, not_settled: 3 } }],
    });
  });
});
