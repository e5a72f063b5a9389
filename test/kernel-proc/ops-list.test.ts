// ops.list pages: each starts after the key (created_at, operation_id) the
// last one ended at, in one order (newest first, operation_id breaking
// ties), each page stops at what one frame carries, and `next_after` is the
// key to ask the next with — so a caller such as archival reaches every
// operation, not only the newest 10 000, and operations that come or go
// between pages neither repeat nor hide another.
import { expect } from 'chai';
import type { OperationKey, ListedOperation } from '../../shared/protocol/kernel-messages.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
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

  /** Every page from the newest, following next_after; `between` runs after each page, with it. */
  async function pages(states: RequestOf<'ops.list'>['states'], limit: number, between?: (page: ListedOperation[]) => Promise<void>) {
    const all: Array<{ after: OperationKey | null; operations: ListedOperation[] }> = [];
    let after: OperationKey | null = null;
    do {
      const page: ResultOf<'ops.list'> = await kernel.request('ops.list', { states, limit, after });
      all.push({ after, operations: page.operations });
      if (page.next_after !== null) expect(page.next_after, 'a page ends at its last operation').to.deep.equal(keyOf(page.operations.at(-1)!));
      after = page.next_after;
      await between?.(page.operations);
    } while (after !== null);
    return all;
  }
  const keyOf = (op: ListedOperation): OperationKey => ({ created_at: op.created_at, operation_id: op.operation_id });
  const ids = (list: Array<{ operations: ListedOperation[] }>) => list.flatMap((page) => page.operations.map((op) => op.operation_id));

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision', settings: { default_grant: null } });
    await kernel.request('executor.pin', pinBody(testExecutor(41)));
    await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1000 }));
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('pages through every operation in the order of one whole listing, without overlap, and ends with next_after null', async () => {
    await reserveMany('page', 23, false);
    const whole = await kernel.request('ops.list', { states: ['reserved'], limit: LIMIT_MAX, after: null });
    expect(whole.operations).to.have.length(23);
    expect(whole.next_after).to.equal(null);
    const paged = await pages(['reserved'], 5);
    expect(paged.map((page) => page.operations.length)).to.deep.equal([5, 5, 5, 5, 3]);
    expect(ids(paged)).to.deep.equal(whole.operations.map((op) => op.operation_id));
    const twentieth = keyOf(whole.operations[19]!);
    // The last page says it is the last, even when it is exactly full.
    expect((await kernel.request('ops.list', { states: ['reserved'], limit: 3, after: twentieth })).next_after).to.equal(null);
    expect((await kernel.request('ops.list', { states: ['reserved'], limit: 2, after: twentieth })).next_after).to.deep.equal(keyOf(whole.operations[21]!));
    expect(await kernel.request('ops.list', { states: ['reserved'], limit: 5, after: keyOf(whole.operations[22]!) })).to.deep.equal({ operations: [], next_after: null });
    // A key is a place in the order, not a row: one no operation has still pages from there.
    const between = { created_at: whole.operations[10]!.created_at, operation_id: '0'.repeat(64) };
    const fromThere = await kernel.request('ops.list', { states: ['reserved'], limit: LIMIT_MAX, after: between });
    expect(fromThere.operations.map((op) => op.operation_id)).to.deep.equal(
      whole.operations.filter((op) => op.created_at < between.created_at || (op.created_at === between.created_at && op.operation_id > between.operation_id)).map((op) => op.operation_id),
    );
    expect((await kernel.request('ops.list', { states: ['reserved'], limit: 5, after: { created_at: 1, operation_id: '0'.repeat(64) } })).operations).to.deep.equal([]);
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
    expect(paged.findIndex((page) => page.operations.some((op) => op.operation_id === all[LIMIT_MAX]!.operation_id))).to.be.greaterThan(0);
    // 10 000 listed operations are ~3 MB: the kernel sent as many as fit one frame.
    expect(paged.length).to.be.greaterThan(2);
    for (const page of paged) expect(Buffer.byteLength(JSON.stringify(page.operations))).to.be.below(DEFAULT_FRAME_LIMITS.maxFrameBytes);
  });

  it('lists every operation once when new ones are created between pages: the new ones are newer than the first page and wait for the next listing', async () => {
    const before = ids(await pages(['denied'], LIMIT_MAX));
    const late: string[] = [];
    const paged = await pages(['denied'], 2_500, async () => {
      late.push((await kernel.request('reserve', reserveBody(`late-${late.length}`, { tool: 'nobody/serves-this' }))).operation_id);
    });
    expect(paged.length, 'several pages, with operations created between them').to.be.greaterThan(2);
    // By offset, each new operation shifted the later pages by one and the last of a page came again at the top of the next.
    // (One created in the millisecond of a page's last key would sort after it, and be listed once.)
    expect(ids(paged).filter((id) => !late.includes(id))).to.deep.equal(before);
    expect(new Set(ids(paged)).size).to.equal(ids(paged).length);
    const now = ids(await pages(['denied'], LIMIT_MAX));
    expect(now.filter((id) => !late.includes(id))).to.deep.equal(before);
    expect(now).to.include.members(late);
  });

  it('skips no operation when some already listed leave the listed states between pages', async () => {
    const nonces = new Map<string, { name: string; nonce: string }>();
    for (let i = 0; i < 30; i++) {
      const name = `leaving-${i}`;
      const reserved = await kernel.request('reserve', reserveBody(name));
      nonces.set(reserved.operation_id, { name, nonce: reserved.nonce!.id });
    }
    const listed = ids(await pages(['reserved'], LIMIT_MAX));
    // After each page, start an operation that page listed: it leaves `reserved`. By offset, the next page began one later and skipped one that stayed.
    const started = new Set<string>();
    const paged = await pages(['reserved'], 7, async (page) => {
      const leaving = page.find((op) => nonces.has(op.operation_id) && !started.has(op.operation_id));
      if (leaving === undefined) return;
      const { name, nonce } = nonces.get(leaving.operation_id)!;
      const answer = await kernel.request('start', { request_id: name, nonce_id: nonce, arguments: reserveBody(name).arguments });
      expect(answer.verdict, answer.reason).to.equal('allow');
      started.add(leaving.operation_id);
    });
    expect(started.size, 'operations that left between pages').to.be.greaterThan(3);
    expect(ids(paged)).to.deep.equal(listed);
    expect(ids(await pages(['reserved'], LIMIT_MAX))).to.deep.equal(listed.filter((id) => !started.has(id)));
  });

  it("lists each operation by its names, state and flag, as operation.get shows them, without the artifacts operation.get answers", async () => {
    const reserved = await kernel.request('reserve', reserveBody('listed-started'));
    const started = await kernel.request('start', { request_id: 'listed-started', nonce_id: reserved.nonce!.id, arguments: reserveBody('listed-started').arguments });
    expect(started.verdict, started.reason).to.equal('allow');
    const [entry] = (await kernel.request('ops.list', { states: ['dispatch_committed'], limit: 1, after: null })).operations;
    const { operation } = await kernel.request('operation.get', { operation_id: null, request_id: 'listed-started' });
    expect(operation!.authorization, 'the operation has an authorization to leave out').to.be.a('string');
    const members = ['operation_id', 'request_id', 'subject', 'tool', 'state', 'capability_id', 'executor_id', 'created_at', 'updated_at', 'flag'] as const;
    expect(Object.keys(entry!)).to.have.members([...members]);
    expect(entry).to.deep.equal(Object.fromEntries(members.map((member) => [member, operation![member]])));
  });

  it('takes a limit of 1 to KERNEL_PAGE_MAX (10,000) in ops.list and recover, and refuses 0 and 10,001', async () => {
    for (const limit of [1, LIMIT_MAX]) {
      expect((await kernel.request('ops.list', { states: null, limit, after: null })).operations.length, `ops.list at ${limit}`).to.be.at.least(1);
      expect((await kernel.request('recover', { limit, after: null })).now, `recover at ${limit}`).to.be.a('number');
    }
    for (const limit of [0, LIMIT_MAX + 1]) {
      expect((await refused(kernel.request('ops.list', { states: null, limit, after: null }))).code, `ops.list at ${limit}`).to.equal('schema_violation');
      expect((await refused(kernel.request('recover', { limit, after: null }))).code, `recover at ${limit}`).to.equal('schema_violation');
    }
  });

  it('refuses ops.list without after, with an offset, or with a key that is not one: the schema is closed and after is required', async () => {
    const missing = { states: null, limit: 10 } as unknown as RequestOf<'ops.list'>;
    expect((await refused(kernel.request('ops.list', missing))).code).to.equal('schema_violation');
    const offset = { states: null, limit: 10, offset: 0 } as unknown as RequestOf<'ops.list'>;
    expect((await refused(kernel.request('ops.list', offset))).code).to.equal('schema_violation');
    for (const after of [{ created_at: 0, operation_id: '0'.repeat(64) }, { created_at: 1, operation_id: 'x' }, { created_at: 1 }, { created_at: 1, operation_id: '0'.repeat(64), extra: 1 }, 'x']) {
      const bad = { states: null, limit: 10, after } as unknown as RequestOf<'ops.list'>;
      expect((await refused(kernel.request('ops.list', bad))).code, JSON.stringify(after)).to.equal('schema_violation');
    }
  });

  it('pages recover the same way: every committed start, oldest first, across pages', async () => {
    const names = Array.from({ length: 7 }, (_, i) => `doubt-${i}`);
    for (const name of names) {
      const reserved = await kernel.request('reserve', reserveBody(name));
      const started = await kernel.request('start', { request_id: name, nonce_id: reserved.nonce!.id, arguments: reserveBody(name).arguments });
      expect(started.verdict, started.reason).to.equal('allow');
    }
    const seen: string[] = [];
    let after: OperationKey | null = null;
    do {
      const page: ResultOf<'recover'> = await kernel.request('recover', { limit: 3, after });
      expect(page.operations.length).to.be.at.most(3);
      seen.push(...page.operations.map((op) => op.request_id));
      after = page.next_after;
    } while (after !== null);
    // The operations the test before started are committed starts too, older than these.
    expect(seen.filter((name) => name.startsWith('doubt-'))).to.deep.equal(names);
    expect(seen.slice(-names.length)).to.deep.equal(names);
    expect(new Set(seen).size).to.equal(seen.length);
  });
});
