// ops.list pages: `offset` skips that many operations in the same order
// (newest first, operation_id breaking ties), each page stops at what one
// frame carries, and `next_offset` says where the next starts — so a caller
// such as archival reaches every operation, not only the newest 10 000.
import { expect } from 'chai';
import type { OperationView } from '../../shared/protocol/kernel-messages.js';
import type { RequestOf } from '../../shared/protocol/messages.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, pinBody, refused, reserveBody, testExecutor } from './helpers.js';

const LIMIT_MAX = 10_000;

describe('kernel-proc: ops.list paging', function () {
  this.timeout(120_000);
  const root = new KernelRoot();
  let kernel: KernelProcess;

  /** Reserve `count` requests named `<prefix>-<n>`, 50 in flight (the kernel answers 64 at once); `deny` makes each a denied operation. */
  async function reserveMany(prefix: string, count: number, deny: boolean): Promise<void> {
    for (let start = 0; start < count; start += 50) {
      const batch = Array.from({ length: Math.min(50, count - start) }, (_, i) =>
        kernel.request('reserve', reserveBody(`${prefix}-${start + i}`, deny ? { tool: 'nobody/serves-this' } : {})),
      );
      for (const answer of await Promise.all(batch)) expect(answer.verdict, answer.reason).to.equal(deny ? 'deny' : 'allow');
    }
  }

  /** Every page from offset 0, following next_offset; `between` runs after each page. */
  async function pages(states: RequestOf<'ops.list'>['states'], limit: number, between?: () => Promise<void>) {
    const all: Array<{ offset: number; operations: OperationView[] }> = [];
    for (let offset: number | null = 0; offset !== null; ) {
      const page: { operations: OperationView[]; next_offset: number | null } = await kernel.request('ops.list', { states, limit, offset });
      all.push({ offset, operations: page.operations });
      offset = page.next_offset;
      await between?.();
    }
    return all;
  }
  const ids = (list: Array<{ operations: OperationView[] }>) => list.flatMap((page) => page.operations.map((op) => op.operation_id));

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision', settings: { default_grant: null } });
    await kernel.request('executor.pin', pinBody(testExecutor(41)));
    await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1000 }));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('pages through every operation in the order of one whole listing, without overlap, and ends with next_offset null', async () => {
    await reserveMany('page', 23, false);
    const whole = await kernel.request('ops.list', { states: ['reserved'], limit: LIMIT_MAX, offset: 0 });
    expect(whole.operations).to.have.length(23);
    expect(whole.next_offset).to.equal(null);
    const paged = await pages(['reserved'], 5);
    expect(paged.map((page) => [page.offset, page.operations.length])).to.deep.equal([[0, 5], [5, 5], [10, 5], [15, 5], [20, 3]]);
    expect(ids(paged)).to.deep.equal(whole.operations.map((op) => op.operation_id));
    // The last page says it is the last, even when it is exactly full.
    expect((await kernel.request('ops.list', { states: ['reserved'], limit: 3, offset: 20 })).next_offset).to.equal(null);
    expect((await kernel.request('ops.list', { states: ['reserved'], limit: 2, offset: 20 })).next_offset).to.equal(22);
    expect(await kernel.request('ops.list', { states: ['reserved'], limit: 5, offset: 23 })).to.deep.equal({ operations: [], next_offset: null });
    expect((await kernel.request('ops.list', { states: ['reserved'], limit: 5, offset: Number.MAX_SAFE_INTEGER })).operations).to.deep.equal([]);
  });

  it('reaches operations beyond the newest 10 000, each page cut to one frame', async () => {
    await reserveMany('bulk', LIMIT_MAX + 7, true);
    const paged = await pages(['denied'], LIMIT_MAX);
    const all = paged.flatMap((page) => page.operations);
    expect(all).to.have.length(LIMIT_MAX + 7);
    expect(new Set(all.map((op) => op.request_id)).size).to.equal(LIMIT_MAX + 7);
    // The oldest is last, past offset 10 000 (reserves made in the same millisecond tie; operation_id orders those).
    const oldest = Math.min(...all.map((op) => op.created_at));
    expect(all[all.length - 1]!.created_at).to.equal(oldest);
    expect(all.map((op) => op.created_at)).to.deep.equal([...all.map((op) => op.created_at)].sort((a, b) => b - a));
    expect(paged.some((page) => page.offset + page.operations.length > LIMIT_MAX)).to.equal(true);
    // A view carries a signed receipt: 10 000 would be megabytes, so the kernel sent as many as fit.
    expect(paged.length).to.be.greaterThan(2);
    for (const page of paged) expect(Buffer.byteLength(JSON.stringify(page.operations))).to.be.below(DEFAULT_FRAME_LIMITS.maxFrameBytes);
  });

  it('misses no terminal operation when new ones are created between pages: they only repeat some at a boundary', async () => {
    const before = ids(await pages(['denied'], LIMIT_MAX));
    let added = 0;
    const paged = await pages(['denied'], 2_500, async () => {
      await kernel.request('reserve', reserveBody(`late-${added++}`, { tool: 'nobody/serves-this' }));
    });
    const seen = new Set(ids(paged));
    expect(before.filter((id) => !seen.has(id))).to.deep.equal([]);
  });

  it('refuses ops.list without offset, with a negative one or with another member: the schema is closed and offset is required', async () => {
    const missing = { states: null, limit: 10 } as unknown as RequestOf<'ops.list'>;
    expect((await refused(kernel.request('ops.list', missing))).code).to.equal('schema_violation');
    expect((await refused(kernel.request('ops.list', { states: null, limit: 10, offset: -1 }))).code).to.equal('schema_violation');
    const extra = { states: null, limit: 10, offset: 0, cursor: 'x' } as unknown as RequestOf<'ops.list'>;
    expect((await refused(kernel.request('ops.list', extra))).code).to.equal('schema_violation');
  });

  it('pages recover the same way: every committed start, oldest first, across pages', async () => {
    const names = Array.from({ length: 7 }, (_, i) => `doubt-${i}`);
    for (const name of names) {
      const reserved = await kernel.request('reserve', reserveBody(name));
      const started = await kernel.request('start', { request_id: name, nonce_id: reserved.nonce!.id, arguments: reserveBody(name).arguments });
      expect(started.verdict, started.reason).to.equal('allow');
    }
    const seen: string[] = [];
    for (let offset: number | null = 0; offset !== null; ) {
      const page: { operations: OperationView[]; next_offset: number | null } = await kernel.request('recover', { limit: 3, offset });
      expect(page.operations.length).to.be.at.most(3);
      seen.push(...page.operations.map((op) => op.request_id));
      offset = page.next_offset;
    }
    expect(seen).to.deep.equal(names);
  });
});
