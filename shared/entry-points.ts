// The build's programs and where each is found. `npm run build` compiles every
// module with tsc into dist/, then bundles each program below into
// dist/bundle/<name>.js (scripts/bundle.ts): a process loads a few files
// instead of ~190 modules, which is most of what starting one cost
// (docs/PERFORMANCE.md, "Process start"). The supervisor starts the bundles;
// the module entries (dist/kernel-proc/main.js, ...) run the same code and stay
// usable, for a remote executor's argv for one.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CustodyError } from './errors.js';

/** Each program's name and its entry module, relative to dist/. */
export const PROGRAMS = {
  custody: 'supervisor/cli/main.js',
  kernel: 'kernel-proc/main.js',
  executor: 'executor-proc/main.js',
  'adapter-host': 'executor-proc/adapters/host/main.js',
} as const;

export type ProgramName = keyof typeof PROGRAMS;

/**
 * dist/, from this module's own place. Inside a bundle, scripts/bundle.ts
 * gives every module the URL of its unbundled file, so this holds there too.
 */
export const DIST_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export const BUNDLE_DIR = path.join(DIST_ROOT, 'bundle');

/** The file that runs `program`: its bundle. */
export function programPath(program: ProgramName): string {
  return path.join(BUNDLE_DIR, `${program}.js`);
}

/** `programPath`, refused with what to do when the build has no bundles (only tsc ran). */
export function installedProgram(program: ProgramName): string {
  const file = programPath(program);
  if (!existsSync(file)) {
    throw new CustodyError('not_found', `${file} is missing: this build has no bundled programs; run \`npm run build\`, which ends by bundling them (scripts/bundle.ts)`);
  }
  return file;
}

/**
 * The modules a bundled program imports, in the order they load (Node's
 * built-ins left out): scripts/bundle.ts checks that the inspector guard
 * comes first (docs/SECURITY.md "Signals").
 */
export function programImports(text: string): string[] {
  return [...text.matchAll(/^import\s*(?:[^'"]*?from\s*)?["']([^"']+)["'];?/gm)].map((match) => match[1]!).filter((source) => !source.startsWith('node:'));
}
