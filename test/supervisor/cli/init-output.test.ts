// `custody init` is quiet for people: the summary only, with warnings and
// errors; `--verbose` shows the info lines of init and of the children it
// provisions. Run as a separate process with stderr a pipe, and on a
// pseudo-terminal through util-linux `script` where it exists.
import { expect } from 'chai';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { childLineShown } from '../../../supervisor/cli/commands/service.js';
import { CLI, custody } from '../../helpers/service.js';

const run = promisify(execFile);

const INFO_LINE = /"level":"info"/;
const SUMMARY = /^Initialized .*\n {2}kernel {4}[0-9a-f]{64}/m;

describe('custody init output', function () {
  this.timeout(60_000);
  let dir: string;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-init-out-'));
  });

  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const env = { CUSTODY_LOG_LEVEL: '' };

  it("prints the summary without the children's info lines by default", async () => {
    const result = await custody(['init', '--state', path.join(dir, 'state')], { env });
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.match(SUMMARY);
    expect(result.stderr).not.to.match(INFO_LINE);
    expect(result.stderr).to.equal('');
  });

  it("shows init's and the children's info lines with --verbose", async () => {
    const result = await custody(['init', '--state', path.join(dir, 'state'), '--verbose'], { env });
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.match(SUMMARY);
    expect(result.stderr).to.match(/"level":"info","role":"kernel".*"event":"kernel_provisioned"/);
    expect(result.stderr).to.match(/"level":"info","component":"init".*"event":"executor_provisioned"/);
  });

  it("still shows warnings and errors by default: a child's warning and init's failure", async () => {
    // The executor kills itself after provisioning (a crash-matrix cutpoint), warning first.
    const result = await custody(['init', '--state', path.join(dir, 'state')], { env: { ...env, CUSTODY_FAULT: 'executor:after_provision_commit' } });
    expect(result.code).to.not.equal(0);
    expect(result.stderr).to.match(/"level":"warn".*"event":"fault_injected"/);
    expect(result.stderr).not.to.match(INFO_LINE);
    expect(result.stderr).to.match(/"level":"warn","component":"init".*"event":"child_refused"/);
    expect(result.stderr).to.match(/^custody: .*\[channel_closed\]$/m);
  });

  // util-linux `script` (not the BSD one, whose arguments differ).
  const hasScript = (() => {
    try {
      return /util-linux/.test(execFileSync('script', ['--version'], { encoding: 'utf8' }));
    } catch {
      return false;
    }
  })();

  it('is quiet on a terminal too, and --verbose shows the info lines there (util-linux script), on a sized terminal and on one of no width', async function () {
    if (!hasScript) this.skip();
    // `stty` sizes the pty script makes: 80 columns, or none at all (what a pty nobody sized reports).
    const onTty = async (extra: string, columns: number) => {
      const state = path.join(dir, `state-${columns}${extra ? '-v' : ''}`);
      const command = [process.execPath, CLI, 'init', '--state', state, extra].filter(Boolean).map((a) => `'${a}'`).join(' ');
      const { stdout } = await run('script', ['-qec', `stty cols ${columns} rows ${columns === 0 ? 0 : 24}; ${command}`, '/dev/null'], { env: { ...process.env, ...env } });
      // Provisioning takes over a second, so a spinner may run; it draws a few lines, never megabytes.
      expect(stdout.length, `output at ${columns} columns`).to.be.below(64 * 1024);
      return stdout;
    };
    for (const columns of [80, 0]) {
      const quiet = await onTty('', columns);
      expect(quiet).to.match(/Initialized /);
      expect(quiet).not.to.match(INFO_LINE);
      const verbose = await onTty('--verbose', columns);
      expect(verbose).to.match(/Initialized /);
      expect(verbose).to.match(INFO_LINE);
    }
  });

  const lines: Array<{ line: string; level: 'info' | 'warn'; shown: boolean }> = [
    { line: '{"level":"info","event":"child_serving"}', level: 'warn', shown: false },
    { line: '{"level":"debug","event":"x"}', level: 'warn', shown: false },
    { line: '{"level":"warn","event":"fault_injected"}', level: 'warn', shown: true },
    { line: '{"level":"error","event":"x"}', level: 'warn', shown: true },
    { line: '{"level":"info","event":"child_serving"}', level: 'info', shown: true },
    { line: 'Error: something broke\n    at main.js:1', level: 'warn', shown: true },
    { line: '{"event":"no level"}', level: 'warn', shown: true },
  ];
  for (const { line, level, shown } of lines) {
    it(`${shown ? 'shows' : 'hides'} the child line ${line.slice(0, 40)} at level ${level}`, () => {
      expect(childLineShown(line, level)).to.equal(shown);
    });
  }
});
