// Executor pools on the kernel's side: a start may name another executor of
// the tool's pool while the operation is reserved; once started, the
// authorization binds it.
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import type { ResultOf } from '../../shared/protocol/messages.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, holdOf, pinBody, reserveBody, testExecutor } from './helpers.js';

describe('kernel-proc: start addressed to an executor of the pool', function () {
  this.timeout(20_000);
  const root = new KernelRoot();
  const first = testExecutor(31, 'exec-a');
  const second = testExecutor(32, 'exec-b');
  const other = testExecutor(33, 'exec-other');
  let kernel: KernelProcess;
  let grant: string;

  const reserve = (id: string) => kernel.request('reserve', reserveBody(id, { capability_id: grant }));
  const start = (reserved: ResultOf<'reserve'>, id: string, executorId?: string) =>
    kernel.request('start', { request_id: id, nonce_id: reserved.nonce!.id, arguments: { note: `note for ${id}` }, ...(executorId === undefined ? {} : { executor_id: executorId }) });
  const addressee = (started: ResultOf<'start'>) => decodeArtifact('authorization', started.authorization!, { trustedSigners: [root.publicKey] }).body.executor.id;
  const executorOf = (operationId: string) => root.read<{ executor_id: string }>('SELECT executor_id FROM operations WHERE operation_id = ?', operationId)[0]!.executor_id;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(first));
    await kernel.request('executor.pin', pinBody(second));
    await kernel.request('executor.pin', pinBody(other, ['other-tool/*']));
    grant = (await kernel.request('grant.add', grantBody(TOOL, { max_invocations: 1000 }))).capability_id;
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  it('addresses the authorization to the executor the start names, and records it', async () => {
    for (const [id, target] of [['p-a', 'exec-a'], ['p-b', 'exec-b']] as const) {
      const reserved = await reserve(id);
      const started = await start(reserved, id, target);
      expect(started).to.include({ verdict: 'allow', state: 'dispatch_committed' });
      expect(addressee(started)).to.equal(target);
      expect(executorOf(reserved.operation_id)).to.equal(target);
    }
  });

  it('keeps the executor chosen at reserve when the start names none', async () => {
    const reserved = await reserve('p-default');
    const chosen = executorOf(reserved.operation_id);
    const started = await start(reserved, 'p-default');
    expect(addressee(started)).to.equal(chosen);
  });

  it('denies a start named to an executor that does not serve the tool, releasing the hold', async () => {
    for (const [id, target] of [['p-wrong-tool', 'exec-other'], ['p-unpinned', 'exec-nobody']] as const) {
      const reserved = await reserve(id);
      const denied = await start(reserved, id, target);
      expect(denied).to.include({ verdict: 'deny', reason: 'tool_unknown', state: 'start_denied' });
      expect(holdOf(root, reserved.operation_id)!.state).to.equal('released');
    }
  });

  it('binds a started operation to its executor: a retry naming another gets the first authorization, unchanged', async () => {
    const reserved = await reserve('p-bound');
    const started = await start(reserved, 'p-bound', 'exec-a');
    const again = await start(reserved, 'p-bound', 'exec-b');
    expect(again.authorization).to.equal(started.authorization);
    expect(executorOf(reserved.operation_id)).to.equal('exec-a');
  });

  it('refuses, in the store itself, a change of executor once the operation is started', () => {
    const [row] = root.read<{ operation_id: string }>("SELECT operation_id FROM operations WHERE request_id = 'p-bound'");
    const db = new Database(path.join(root.dir, 'kernel.db'));
    try {
      expect(() => db.prepare("UPDATE operations SET executor_id = 'exec-b' WHERE operation_id = ?").run(row!.operation_id)).to.throw(/executor_id changes only while the operation is reserved/);
    } finally {
      db.close();
    }
  });
});
