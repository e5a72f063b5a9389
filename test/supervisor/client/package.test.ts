// `custody/client` from another project, as a user gets it: `npm pack` of
// this package, the tarball installed into a scratch project, an ESM script
// that imports `custody/client` and asks a live service, and a TypeScript
// file type-checked against the published declarations.
//
// The install needs custody's dependencies: from npm's cache when they are
// there (--prefer-offline), else from the registry. With no network and no
// cache the test is skipped and says so; any other failure fails.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { type TestService, startService } from '../../helpers/service.js';
import { distPath } from '../../helpers/children.js';

const run = promisify(execFile);
const REPO = path.resolve(distPath(), '..');
const NPM_OFFLINE_FAILURES = /ENOTCACHED|EAI_AGAIN|ENOTFOUND|ECONNREFUSED|ETIMEDOUT|network/;

const SCRIPT = `
import { CustodyClient, CustodyError } from 'custody/client';
const client = CustodyClient.fromState(process.argv[2]);
const health = await client.health();
const status = await client.status();
const tools = await client.tools();
let refused = null;
try {
  await new CustodyClient({ url: client.url, token: 'f'.repeat(64), retries: 0 }).status();
} catch (error) {
  refused = { isCustodyError: error instanceof CustodyError, code: error.code, errorClass: error.errorClass };
}
let unreachable = null;
try {
  await new CustodyClient({ url: process.argv[3], token: 'f'.repeat(64), retries: 1, retryDelayMs: 1 }).health();
} catch (error) {
  unreachable = error.code;
}
console.log(JSON.stringify({ health, status, tools: tools.tools.map((t) => t.tool), refused, unreachable }));
`;

const TYPED = `
import { CustodyClient, type DriveAnswer, type Status } from 'custody/client';
const client = new CustodyClient({ url: 'http://127.0.0.1:7410', token: 'x' });
export async function run(): Promise<number> {
  const status: Status = await client.status();
  const answer: DriveAnswer = await client.invoke({ tool: 'review-notes/append', arguments: { note: 'typed' } });
  return status.children.length + answer.http_status;
}
// @ts-expect-error: invoke needs a tool
void client.invoke({ arguments: {} });
`;

describe('custody/client from a packed tarball', function () {
  this.timeout(180_000);
  let service: TestService;
  let scratch: string;

  before(async () => {
    service = await startService();
    scratch = mkdtempSync(path.join(tmpdir(), 'custody-client-'));
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('installs into a scratch project, imports from custody/client, answers health and status from a live service, and type-checks', async function () {
    this.slow(60_000);
    // The build has made dist; the declarations are made here too (a build with tsconfig.json alone skips them). Pack as they are.
    await run(process.execPath, [path.join(REPO, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.client.json'], { cwd: REPO });
    await run('npm', ['pack', '--ignore-scripts', '--pack-destination', scratch], { cwd: REPO });
    const tarball = readdirSync(scratch).find((f) => f.endsWith('.tgz'))!;
    const project = path.join(scratch, 'project');
    mkdirSync(project);
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'scratch', version: '1.0.0', type: 'module', private: true }));
    const started = Date.now();
    try {
      await run('npm', ['install', path.join(scratch, tarball), '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', '--omit=dev'], { cwd: project, timeout: 120_000 });
    } catch (error) {
      const output = `${(error as { stderr?: string }).stderr ?? ''}${(error as Error).message}`;
      if (NPM_OFFLINE_FAILURES.test(output)) {
        console.warn(`      skipped: npm could not fetch custody's dependencies (no cache, no network): ${output.split('\n')[0]}`);
        this.skip();
      }
      throw error;
    }
    const installMs = Date.now() - started;
    expect(installMs, 'npm install of the tarball').to.be.below(120_000);

    writeFileSync(path.join(project, 'check.mjs'), SCRIPT);
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const freePort = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const { stdout } = await run(process.execPath, ['check.mjs', service.dir, `http://127.0.0.1:${freePort}`], { cwd: project });
    const answer = JSON.parse(stdout) as { health: { status: string }; status: { children: Array<{ role: string; state: string }> }; tools: string[]; refused: Record<string, unknown>; unreachable: string };
    expect(answer.health.status).to.equal('ok');
    expect(answer.status.children.map((c) => c.role)).to.include.members(['kernel', 'executor']);
    expect(answer.tools).to.include('review-notes/append');
    expect(answer.refused).to.deep.equal({ isCustodyError: true, code: 'unauthorized', errorClass: 'auth' });
    expect(answer.unreachable).to.equal('service_unavailable');

    writeFileSync(path.join(project, 'typed.ts'), TYPED);
    writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', target: 'ES2022', strict: true, noEmit: true, skipLibCheck: false, typeRoots: [path.join(REPO, 'node_modules', '@types')], types: ['node'] }, files: ['typed.ts'] }),
    );
    await run(process.execPath, [path.join(REPO, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: project }).catch((error: { stdout?: string }) => {
      throw new Error(`the scratch project does not type-check against custody/client:\n${error.stdout ?? ''}`);
    });
  });
});
