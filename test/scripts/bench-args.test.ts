// The benches' command lines (scripts/bench/args.ts, ab.ts): --help prints
// the usage and exits 0; a wrong option or count says why with the usage and
// exits 2, before anything is measured (each call below would otherwise
// start a bench of minutes).
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const BENCH = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../scripts/bench');

function run(script: string, args: string[]) {
  const result = spawnSync(process.execPath, [path.join(BENCH, script), ...args], { encoding: 'utf8', timeout: 20_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('the benches\' command lines', function () {
  this.timeout(60_000);

  for (const script of ['all.js', 'pages.js', 'archive-stall.js', 'listing.js', 'ab.js']) {
    it(`${script}: --help prints the usage and exits 0; an unknown option exits 2 naming it`, () => {
      const help = run(script, ['--help']);
      expect(help.code, help.stderr).to.equal(0);
      expect(help.stdout).to.match(/^usage: /);
      const bogus = run(script, ['--bogus']);
      expect(bogus.code).to.equal(2);
      expect(bogus.stderr).to.contain('unknown option "--bogus"').and.to.contain('usage: ');
    });
  }

  it('refuses a count that is not a whole number of at least 1, and one count too many', () => {
    const zero = run('listing.js', ['0']);
    expect(zero.code).to.equal(2);
    expect(zero.stderr).to.contain('operations takes a whole number of at least 1, got "0"');
    const word = run('listing.js', ['20000', 'three']);
    expect(word.code).to.equal(2);
    expect(word.stderr).to.contain('rounds takes a whole number of at least 1, got "three"');
    const extra = run('archive-stall.js', ['10', '20']);
    expect(extra.code).to.equal(2);
    expect(extra.stderr).to.contain('2 counts given, at most 1 taken');
    const rounds = run('ab.js', ['--build', 'a=dist', '--rounds', 'x']);
    expect(rounds.code).to.equal(2);
    expect(rounds.stderr).to.contain('--rounds takes a whole number of at least 1, got "x"');
  });
});
