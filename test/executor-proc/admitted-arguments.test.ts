// One argument check per operation (executor-proc/admitted-arguments.ts):
// arguments the adapter admitted at arguments.check are not asked again by
// the execute that follows, on the same adapter host; anything else is
// asked. The fixture adapter fixture/counted-check appends the adapter
// host's pid and the arguments to a file each time its schema runs, so each
// test counts exactly which checks reached the adapter.
import { expect } from 'chai';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { type Executor, type Home, authorize, executeBody, makeHome, provisioned, removeHome, startExecutor, stopExecutor } from './helpers.js';
import { codeOfAnswer } from '../helpers/codes.js';
import { eventually } from '../helpers/eventually.js';

const TOOL = 'fixture/counted-check';

describe('executor-proc: one argument check per operation', function () {
  this.timeout(30_000);
  let home: Home;
  let executor: Executor | undefined;

  beforeEach(async () => {
    home = makeHome();
    await provisioned(home);
  });

  afterEach(async () => {
    if (executor) await stopExecutor(executor);
    executor = undefined;
    removeHome(home);
  });

  /** Every run of the adapter's schema so far: the host's pid and the arguments it was shown. */
  function checks(): Array<{ pid: number; args: { n: number } }> {
    const file = path.join(home.faults, 'argument-checks');
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => {
        const space = line.indexOf(' ');
        return { pid: Number(line.slice(0, space)), args: JSON.parse(line.slice(space + 1)) as { n: number } };
      });
  }

  const check = (n: number) => executor!.channel.request('arguments.check', { tool: TOOL, arguments: { n } });
  async function execute(n: number): Promise<string> {
    const answer = await executor!.channel.request('execute', executeBody(authorize(executor!, { tool: TOOL, args: { n } })));
    return answer.status;
  }

  it('asks the adapter once for an operation whose arguments arguments.check admitted, and again for a repeat or other arguments', async () => {
    executor = await startExecutor(home);
    expect(await check(1)).to.deep.equal({ tool: TOOL, admitted: true });
    expect(checks().map((c) => c.args.n)).to.deep.equal([1]);
    expect(await execute(1)).to.equal('completed');
    // The execute did not ask: the check's verdict was taken.
    expect(checks().map((c) => c.args.n)).to.deep.equal([1]);
    // Taken once: another operation with the same arguments is asked.
    expect(await execute(1)).to.equal('completed');
    expect(checks().map((c) => c.args.n)).to.deep.equal([1, 1]);
    // Other arguments than the ones admitted are asked.
    await check(2);
    expect(await execute(3)).to.equal('completed');
    expect(checks().map((c) => c.args.n)).to.deep.equal([1, 1, 2, 3]);
  });

  it('still refuses at execute what the adapter refuses: a refusal at the check is not remembered', async () => {
    executor = await startExecutor(home);
    expect(await codeOfAnswer(executor.channel.request('arguments.check', { tool: TOOL, arguments: { n: 'x' } }))).to.equal('arguments_invalid');
    const answer = await executor.channel.request('execute', executeBody(authorize(executor, { tool: TOOL, args: { n: 'x' } as unknown as { n: number } })));
    expect(answer.status).to.equal('never_claimed');
    expect(checks()).to.have.length(2);
  });

  it('asks again when the adapter host that admitted the arguments was replaced', async () => {
    executor = await startExecutor(home);
    await check(5);
    const [first] = checks();
    process.kill(first!.pid, 'SIGKILL');
    await eventually(() => executor!.stderr.some((line) => line.includes('"adapter_host_exited"')), 10_000, 'the executor saw its adapter host exit');
    expect(await execute(5)).to.equal('completed');
    const all = checks();
    expect(all).to.have.length(2);
    expect(all[1]!.pid, 'the new host asked').to.not.equal(first!.pid);
  });

  it('keeps admitted_arguments_max verdicts: at the bound all are used, one past it the oldest is asked again', async () => {
    executor = await startExecutor(home, { settings: { admitted_arguments_max: 2 } });
    await check(1);
    await check(2);
    expect(await execute(1)).to.equal('completed');
    expect(await execute(2)).to.equal('completed');
    expect(checks().map((c) => c.args.n)).to.deep.equal([1, 2]);
    await check(11);
    await check(12);
    await check(13);
    expect(await execute(11)).to.equal('completed');
    expect(await execute(13)).to.equal('completed');
    expect(checks().map((c) => c.args.n)).to.deep.equal([1, 2, 11, 12, 13, 11]);
  });

  it('asks the adapter at every execute with admitted_arguments_max 0', async () => {
    executor = await startExecutor(home, { settings: { admitted_arguments_max: 0 } });
    await check(7);
    expect(await execute(7)).to.equal('completed');
    expect(checks().map((c) => c.args.n)).to.deep.equal([7, 7]);
  });
});
