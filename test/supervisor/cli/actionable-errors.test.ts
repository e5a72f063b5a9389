// Every CLI refusal (exit 3) and every "not known / not complete" answer
// (exit 4) says what to do next where there is something: the exact grant to
// add, the name to ask again with, the pid holding a lock, the command that
// carries the operation on. One real service; the cases run in order, as an
// operator would meet them (the grant cases last: they use up the grant).
import { expect } from 'chai';
import { type CliResult, type TestService, custody, startService } from '../../helpers/service.js';
import { untilHolds } from '../../helpers/eventually.js';
import { until } from '../../helpers/eventually.js';

interface Case {
  readonly what: string;
  /** Commands run first, whose answers are not checked (beyond not crashing the test). */
  readonly before?: ReadonlyArray<readonly string[]>;
  /** The command whose answer is checked; `{root}` is the state directory. */
  readonly run: readonly string[];
  /** Without --state: for commands that take the state directory themselves. */
  readonly bare?: boolean;
  readonly exit: number;
  /** Where the message is: a refusal outcome is printed on stdout, an error on stderr. */
  readonly stream: 'stdout' | 'stderr';
  readonly says: RegExp;
}


const CASES: readonly Case[] = [
  {
    what: 'a tool no executor serves says so, not that a grant is missing',
    run: ['invoke', 'nosuch/tool', '--arg', 'x=1'],
    exit: 3,
    stream: 'stderr',
    says: /no executor serves nosuch\/tool: the tools served are those custody.json's executors\[\]\.tools name \(GET \/v1\/tools lists them\); nothing was recorded \[tool_unknown\]/,
  },
  {
    what: 'a request id reused with other arguments says to choose another id',
    before: [['invoke', 'review-notes/append', '--arg', 'note=first', '--request-id', 'dup-1']],
    run: ['invoke', 'review-notes/append', '--arg', 'note=second', '--request-id', 'dup-1'],
    exit: 3,
    stream: 'stderr',
    says: /request id dup-1 was already used for a different invoke request; nothing was done for this one: give it an id of its own \(a name you keep, so a retry finds it\), or see the first with custody trace dup-1 \[request_conflict\]/,
  },
  {
    what: 'an answer that is not complete yet names the command to ask again with',
    run: ['invoke', 'review-notes/append', '--arg', 'note=slowly', '--request-id', 'waited-1', '--wait', '1'],
    exit: 4,
    stream: 'stdout',
    says: /^Not complete: waited-1 is \w+.*; custody carries it on — ask again: custody invoke review-notes\/append … --request-id waited-1, or see custody trace waited-1/,
  },
  {
    what: 'report before execute names execute and reconcile with the operation name',
    before: [['authorize', 'review-notes/append', '--arg', 'note=later', '--operation', 'early-1']],
    run: ['report', 'early-1'],
    exit: 4,
    stream: 'stdout',
    says: /^Not complete: early-1 is authorized \(last: outcome_unknown\); it waits to be executed: run it with custody execute early-1, or close it without effect with custody reconcile early-1/,
  },
  {
    what: 'an operation closed as never claimed says it had no effect and to ask under a new name',
    run: ['reconcile', 'early-1'],
    exit: 3,
    stream: 'stdout',
    says: /^Ended without effect: early-1; the executor's signed report says never_claimed, and the hold was released; it had no effect — to try again, ask under a new name/,
  },
  {
    what: 'a second service on the same state names the pid holding its lock',
    run: ['start', '--state', '{root}'],
    bare: true,
    exit: 3,
    stream: 'stderr',
    says: /locked by pid \d+; another custody process is using it .*: stop that process first \[store_locked\]/,
  },
  {
    what: 'init on a provisioned state says how to start it instead',
    run: ['init', '--state', '{root}'],
    bare: true,
    exit: 3,
    stream: 'stderr',
    says: /custody init never overwrites a state directory \(start it with custody start, or choose another --state\) \[state_exists\]/,
  },
  {
    what: 'a tool whose grant was revoked names the grant to add',
    before: [['grant', 'revoke', '{grant}']],
    run: ['invoke', 'review-notes/append', '--arg', 'note=after revoke'],
    exit: 3,
    stream: 'stdout',
    says: /an operator can add (a new )?one: custody grant add --tool review-notes\/append --max N --ttl 1h/,
  },
  {
    what: 'a used-up grant names the grant to add',
    before: [
      ['grant', 'add', '--tool', 'review-notes/append', '--max', '1', '--ttl', '1h'],
      ['invoke', 'review-notes/append', '--arg', 'note=the one allowed'],
    ],
    run: ['invoke', 'review-notes/append', '--arg', 'note=one too many'],
    exit: 3,
    stream: 'stdout',
    says: /\(denied: budget_exhausted\): the grants covering review-notes\/append have no invocations or cost units left \(custody grant list\); an operator can add one: custody grant add --tool review-notes\/append --max N --ttl 1h/,
  },
];

describe('CLI refusals say what to do next', function () {
  this.timeout(120_000);
  let service: TestService;
  let grant = '';

  before(async () => {
    service = await startService();
    const { grants } = (await service.http('GET', '/v1/grants')).body as { grants: Array<{ capability_id: string }> };
    grant = grants[0]!.capability_id;
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  const fill = (args: readonly string[]) => args.map((a) => a.replace('{root}', service.dir).replace('{grant}', grant));
  const cli = (args: readonly string[], bare = false): Promise<CliResult> => (bare ? custody(fill(args)) : service.cli(fill(args)));

  for (const c of CASES) {
    it(`${c.what} (exit ${c.exit})`, async () => {
      for (const step of c.before ?? []) await cli(step);
      const result = await cli(c.run, c.bare);
      expect(result.code, result.stdout + result.stderr).to.equal(c.exit);
      expect(result[c.stream], result.stdout + result.stderr).to.match(c.says);
    });
  }
});

describe('CLI answers about a failed executor name custody restart', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    // max_restarts 0: the first crash fails the executor; no retry by itself within the test.
    service = await startService({ config: { restart: { max_restarts: 0, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 100, failed_cooldown_s: 300 } } });
    const executor = async () => ((await service.http('GET', '/v1/status')).body as { children: Array<{ role: string; state: string; pid: number | null }> }).children.find((c) => c.role === 'executor')!;
    const running = await until('a running executor', async () => {
      const row = await executor();
      return row.state === 'running' && row.pid !== null ? row : undefined;
    });
    process.kill(running.pid!, 'SIGKILL');
    await until('the executor failed', async () => ((await executor()).state === 'failed' ? true : undefined));
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  it('custody status exits 4 and says custody restart default', async () => {
    const result = await service.cli(['status']);
    expect(result.code).to.equal(4);
    expect(result.stdout).to.match(/custody restart default starts it now/);
  });

  it('an invoke while the only executor is failed starts nothing and says custody status and custody restart (exit 5)', async () => {
    // Executor pools: with no running executor of the tool the request is refused
    // after timing.executor_wait_ms, before anything is logged (executor_unavailable).
    const result = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=while failed', '--request-id', 'failed-1', '--wait', '5s']);
    expect(result.code, result.stdout + result.stderr).to.equal(5);
    expect(result.stderr).to.match(/no executor serving review-notes\/append is running .*default failed; nothing was started .*custody status.*custody restart NAME.*ask again with the same name \[executor_unavailable\]/);
  });
});

describe('CLI against a stopped service', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService();
  });

  after(async () => {
    if (service?.process.pid) process.kill(service.process.pid, 'SIGCONT');
    await service?.stop();
    service?.cleanup();
  });

  it('gives up after --answer-timeout with service_unavailable (exit 5), saying the service may be stopped', async () => {
    // A stopped supervisor still accepts the connection (the kernel's listen backlog) and never answers.
    process.kill(service.process.pid!, 'SIGSTOP');
    try {
      const started = Date.now();
      const result = await service.cli(['status', '--answer-timeout', '1s']);
      expect(result.code, result.stdout + result.stderr).to.equal(5);
      expect(result.stderr).to.match(/did not answer within 1000 ms: it may be stopped \(SIGSTOP\) or hung.*\[service_unavailable\]/);
      expect(Date.now() - started, 'a wait of 1 s, not the default 30 s').to.be.within(1_000, 15_000);
    } finally {
      process.kill(service.process.pid!, 'SIGCONT');
    }
    const again = await service.cli(['status']);
    expect(again.code, again.stderr).to.equal(0);
  });

  it('takes an --answer-timeout from 1 ms to a day and refuses one past either end (exit 2)', async () => {
    for (const bound of ['1d', '86400000ms']) {
      const result = await service.cli(['status', '--answer-timeout', bound]);
      expect(result.code, `${bound}: ${result.stderr}`).to.equal(0);
    }
    // The lower bound is taken: the call is made (answered, or given up as unavailable), never refused as usage.
    const least = await service.cli(['status', '--answer-timeout', '1ms']);
    expect(least.code, least.stderr).to.be.oneOf([0, 5]);
    const past = await service.cli(['status', '--answer-timeout', '86400001ms']);
    expect(past.code).to.equal(2);
    expect(past.stderr).to.match(/--answer-timeout is at most 1d \(86400000 ms\), got "86400001ms"/);
    const zero = await service.cli(['status', '--answer-timeout', '0']);
    expect(zero.code).to.equal(2);
    expect(zero.stderr).to.match(/duration 0 is out of range/);
  });

  it('takes a --wait from 0 to an hour and refuses one past it before sending (exit 2), with no timer warning', async () => {
    for (const bound of ['1h', '3600000ms']) {
      const result = await service.cli(['invoke', 'nosuch/tool', '--wait', bound]);
      // Taken as a wait: the service is asked, and refuses the tool (no executor serves it), not the wait.
      expect(result.stderr, bound).to.not.contain('--wait');
      expect(result.code, `${bound}: ${result.stderr}`).to.equal(3);
    }
    // 0: answered at once with the state so far.
    const zero = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=waited 0', '--wait', '0']);
    expect(zero.code, zero.stderr).to.equal(4);
    expect(zero.stdout).to.match(/^Not complete: /);
    // It goes on in the service: counted below only once it has ended.
    const zeroId = /^Not complete: (\S+) /.exec(zero.stdout)![1]!;
    await untilHolds('the request sent with --wait 0 ended', async () => ((await service.http('GET', `/v1/operations/${zeroId}`)).body as { request?: { final?: boolean } }).request?.final === true, 20_000);
    const logged = async () => ((await service.http('GET', '/v1/operations?limit=100')).body as { operations: unknown[] }).operations.length;
    const before = await logged();
    for (const past of ['3600001ms', '2h', '99999d']) {
      const result = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=never sent', '--wait', past]);
      expect(result.code, `${past}: ${result.stderr}`).to.equal(2);
      expect(result.stderr).to.contain(`--wait is at most 1h (3600000 ms), the longest one call may wait; got "${past}"`);
      expect(result.stderr).to.not.contain('TimeoutOverflowWarning');
    }
    expect(await logged(), 'nothing was sent for the refused waits').to.equal(before);
  });
});
