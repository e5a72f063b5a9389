// A child started with a bad command line leaves with status 64 (EX_USAGE)
// before it reads its preamble: nothing on stdout (no fatal frame, there is
// no session yet), the complaint on stderr. docs/PROTOCOL.md §10.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { distPath } from '../../helpers/children.js';

interface Ran {
  readonly status: number | null;
  readonly stdout: Buffer;
  readonly stderr: string;
}

function run(entry: string, args: readonly string[]): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [distPath(entry), ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }));
    // A preamble-shaped line is offered and must be ignored: the command line is judged first.
    child.stdin.on('error', () => undefined);
    child.stdin.end('{"custody":"custody.preamble.v1"}\n');
  });
}

const CASES: ReadonlyArray<{ name: string; entry: string; args: string[]; says: RegExp }> = [
  { name: 'a kernel without --dir', entry: 'kernel-proc/main.js', args: [], says: /--dir/ },
  { name: 'a kernel given an unknown option', entry: 'kernel-proc/main.js', args: ['--dir', '/nonexistent', '--bogus'], says: /bogus/ },
  { name: 'an executor without --dir', entry: 'executor-proc/main.js', args: ['--resources', '/nonexistent'], says: /--dir/ },
  { name: 'an executor without --resources', entry: 'executor-proc/main.js', args: ['--dir', '/nonexistent'], says: /--resources/ },
  { name: 'an executor given --adapter without a module', entry: 'executor-proc/main.js', args: ['--dir', '/x', '--resources', '/y', '--adapter'], says: /adapter/ },
];

describe('child entry points, given a bad command line', () => {
  for (const { name, entry, args, says } of CASES) {
    it(`${name} exits 64, writes nothing on stdout and names the problem on stderr`, async () => {
      const ran = await run(entry, args);
      expect(ran.status, ran.stderr).to.equal(64);
      expect(ran.stdout.length, 'stdout is the frame channel: no frame without a session').to.equal(0);
      expect(ran.stderr).to.match(says);
    });
  }
});
