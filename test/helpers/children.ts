// Spawning real child processes for process-level tests.
import path from 'node:path';
import { type SpawnChildOptions, type ChildSession, spawnChild } from '../../shared/child/spawn.js';
import { createLogger } from '../../shared/log.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { REPO_ROOT } from './vectors.js';

export const DIST = path.join(REPO_ROOT, 'dist');

export function distPath(...parts: string[]): string {
  return path.join(DIST, ...parts);
}

/** A logger that keeps what children and channels say, for assertions; quiet unless CUSTODY_TEST_LOG is set. */
export function collectingLogger() {
  const lines: string[] = [];
  const log = createLogger({ test: true }, {
    level: 'debug',
    write: (line) => {
      lines.push(line);
      if (process.env.CUSTODY_TEST_LOG) process.stderr.write(line);
    },
  });
  return { log, lines };
}

export type FixtureOptions = Partial<SpawnChildOptions> & { settings?: SpawnChildOptions['settings'] };

/** Start the wire fixture child (test/fixtures/wire-child.ts, bundled by scripts/bundle.ts) with a fresh session. */
export async function startFixture(options: FixtureOptions = {}): Promise<ChildSession & { stderr: string[] }> {
  const stderr: string[] = [];
  const { log } = collectingLogger();
  const session = await spawnChild({
    argv: [process.execPath, distPath('test', 'bundle', 'wire-child.js')],
    role: 'kernel',
    name: 'fixture',
    mode: 'serve',
    pins: { kernel: null },
    settings: {},
    limits: DEFAULT_FRAME_LIMITS,
    expect: null,
    maxInFlight: 16,
    helloTimeoutMs: 10_000,
    log,
    onStderrLine: (line) => stderr.push(line),
    ...options,
  });
  return Object.assign(session, { stderr });
}
