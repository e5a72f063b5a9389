// Running a step as another user. Root writes any file whatever its mode, so
// a test of what a mode forbids runs that step as nobody when it is root.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

export const NOBODY = 65534;
export const IS_ROOT = process.getuid?.() === 0;

/**
 * Whether a process running as nobody can read `files` and the native SQLite
 * binding every program loads (a checkout under a 0700 directory cannot).
 */
export function nobodyCanRead(...files: readonly string[]): boolean {
  const binding = createRequire(import.meta.url).resolve('better-sqlite3');
  const script = 'for (const file of process.argv.slice(1)) require("node:fs").accessSync(file, require("node:fs").constants.R_OK)';
  const probe = spawnSync(process.execPath, ['-e', script, binding, ...files], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' });
  return probe.status === 0;
}
