// The bundled programs (shared/entry-points.ts, scripts/bundle.ts): each is
// the same program as its module entry, and a running service is made of
// them, adapter host included, which finds its files from inside a bundle.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { BUNDLE_DIR, DIST_ROOT, PROGRAMS, type ProgramName, programImports, programPath } from '../../shared/entry-points.js';
import { distPath } from '../helpers/children.js';
import { FIXTURE_EXECUTOR, type TestService, startService } from '../helpers/service.js';

const run = promisify(execFile);

const cmdline = (pid: number): string[] => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);

function childPids(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
}

describe('the bundled programs', function () {
  this.timeout(60_000);

  for (const program of ['custody', 'kernel', 'executor'] as const satisfies readonly ProgramName[]) {
    it(`${program}: the bundle answers --help exactly as its module entry does`, async () => {
      const bundled = await run(process.execPath, [programPath(program), '--help']);
      const modular = await run(process.execPath, [distPath(PROGRAMS[program]), '--help']);
      expect(bundled.stdout + bundled.stderr).to.have.length.above(100);
      expect(bundled).to.deep.equal(modular);
    });
  }

  it("gives every bundled module its own file's URL: import.meta.url appears only in each file's banner", () => {
    // The inspector guard is copied as tsc left it: it imports nothing and has no banner (the test below).
    const files = readdirSync(BUNDLE_DIR).filter((file) => file.endsWith('.js') && file !== 'inspector-guard.js');
    expect(files.length).to.be.at.least(Object.keys(PROGRAMS).length);
    let rewritten = 0;
    for (const file of files) {
      const lines = readFileSync(path.join(BUNDLE_DIR, file), 'utf8').split('\n');
      const banner = lines.findIndex((line) => line.includes('__custodyCreateRequire(import.meta.url)'));
      expect(banner, `${file} has the banner`).to.be.within(0, 1);
      const elsewhere = lines.filter((line, index) => index !== banner && line.includes('import.meta.url'));
      expect(elsewhere, `${file}: a module would see the bundle's URL as its own`).to.deep.equal([]);
      rewritten += lines.filter((line) => line.includes('__custodyModuleUrl("shared/entry-points.js")')).length;
    }
    expect(rewritten, 'shared/entry-points.js finds dist/ from its own URL').to.be.at.least(1);
  });

  it('loads the inspector guard before anything else in every program: its first import, a file that imports nothing', () => {
    for (const program of Object.keys(PROGRAMS)) {
      const imports = programImports(readFileSync(path.join(BUNDLE_DIR, `${program}.js`), 'utf8'));
      expect(imports.length, program).to.be.above(1);
      expect(imports[0], `${program}: SIGUSR1 would open the inspector while the modules before the guard load`).to.equal('./inspector-guard.js');
    }
    const guard = readFileSync(path.join(BUNDLE_DIR, 'inspector-guard.js'), 'utf8');
    expect(programImports(guard)).to.deep.equal([]);
    expect(guard).to.include("process.on('SIGUSR1'");
  });

  it('refuses to provision from a build without them, and says to run npm run build', async () => {
    // The compiled modules alone (as `tsc` leaves them), in a folder whose node_modules is this checkout's.
    const root = mkdtempSync(path.join(tmpdir(), 'custody-nobundle-'));
    try {
      for (const dir of ['shared', 'supervisor', 'kernel-proc', 'executor-proc']) cpSync(path.join(DIST_ROOT, dir), path.join(root, 'dist', dir), { recursive: true });
      symlinkSync(path.join(DIST_ROOT, '..', 'node_modules'), path.join(root, 'node_modules'));
      const failed = await run(process.execPath, [path.join(root, 'dist', PROGRAMS.custody), 'init', '--state', path.join(root, 'state')]).then(
        () => null,
        (error: { code: number; stderr: string }) => error,
      );
      expect(failed, 'init fails').to.not.equal(null);
      expect(failed!.stderr).to.include(`${path.join(root, 'dist', 'bundle', 'kernel.js')} is missing`).and.include('npm run build').and.include('[not_found]');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  describe('a service started from them', () => {
    let service: TestService;
    before(async () => {
      service = await startService({ config: { executors: [FIXTURE_EXECUTOR] } });
    });
    after(async () => {
      await service?.stop();
      service?.cleanup();
    });

    it('runs every process from its bundle and completes a call through the adapter host', async () => {
      expect(cmdline(service.process.pid!)).to.include(programPath('custody'));
      const status = await service.http('GET', '/v1/status');
      const children = status.body.children as Array<{ name: string; role: string; pid: number }>;
      const kernel = children.find((c) => c.role === 'kernel')!;
      const executor = children.find((c) => c.role === 'executor')!;
      expect(cmdline(kernel.pid)).to.include(programPath('kernel'));
      expect(cmdline(executor.pid)).to.include(programPath('executor'));
      const hosts = childPids(executor.pid).filter((pid) => cmdline(pid).includes(programPath('adapter-host')));
      expect(hosts, 'the executor forked its adapter host from the bundle').to.have.length(1);

      const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'from the bundles' } }, 'agent');
      expect(answer.body.outcome, JSON.stringify(answer.body)).to.equal('completed');
    });

    it("publishes a fixture adapter's zod schema, made by the adapter's own zod, as JSON Schema", async () => {
      expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 10, ttl_ms: 3_600_000 })).status).to.equal(201);
      const tools = (await service.http('GET', '/v1/tools', undefined, 'agent')).body.tools as Array<{ tool: string; input_schema: Record<string, unknown> | null }>;
      const sleep = tools.find((t) => t.tool === 'fixture/sleep');
      expect(sleep?.input_schema).to.have.nested.property('properties.ms.maximum', 60_000);
    });
  });
});
