// An outsider hosts the real kernel from docs/PROTOCOL.md alone: a Python 3
// script (standard library only, its own HKDF, HMAC framing and RFC 8032
// Ed25519) provisions and serves the built kernel-proc and an executor-proc,
// checks hello, ping, shutdown, two poisonings and a fatal refusal, and
// replays the published vector chains. Skipped, loudly, when python3 is absent, except under CI.
import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { distPath } from '../helpers/children.js';
import { REPO_ROOT } from '../helpers/vectors.js';

const SCRIPT = path.join(REPO_ROOT, 'test', 'conformance', 'host_child.py');
const VECTORS = path.join(REPO_ROOT, 'docs', 'vectors', 'protocol.json');

function pythonAvailable(): boolean {
  const probe = spawnSync('python3', ['--version'], { stdio: 'ignore' });
  return probe.status === 0;
}

describe('a host written from docs/PROTOCOL.md in another language (Python 3)', function () {
  this.timeout(60_000);

  before(function () {
    if (pythonAvailable()) return;
    if (process.env.CI === 'true') throw new Error('python3 is required under CI for the conformance host');
    process.stderr.write('\n*** SKIPPING the Python conformance host: python3 not found on PATH ***\n\n');
    this.skip();
  });

  it('provisions and serves the real kernel and an executor, sees every documented refusal, and replays both vector chains', async () => {
    const { status, stdout, stderr } = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn('python3', [SCRIPT, '--node', process.execPath, '--kernel', distPath('kernel-proc', 'main.js'), '--executor', distPath('executor-proc', 'main.js'), '--vectors', VECTORS]);
      let out = '';
      let err = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
      child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
      child.on('error', reject);
      child.on('close', (code) => resolve({ status: code, stdout: out, stderr: err }));
    });
    expect(status, `${stdout}\n${stderr}`).to.equal(0);
    const passed = stdout.split('\n').filter((line) => line.startsWith('ok '));
    expect(passed, stdout).to.have.length(13);
    expect(stdout).to.include('grant.list pages by next_after');
    expect(stdout).not.to.include('FAIL');
  });
});
