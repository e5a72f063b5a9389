// The last step of `npm run build`: each program of shared/entry-points.ts,
// compiled by tsc into dist/, bundled with esbuild into dist/bundle/<name>.js
// and the chunks the programs share. Loading ~190 ES modules one by one
// (resolve, stat, read, link each) was most of a process's start: the kernel,
// an executor and its adapter host start for every restart and every test
// (docs/PERFORMANCE.md, "Process start").
//
// Nothing changes in what runs, with two exceptions handled here:
// - `import.meta.url` is the URL of the file that holds it. In a bundle that
//   would be the bundle's, so every module's own is put in its place (the URL
//   its compiled file has in dist/): a module that finds a file beside it
//   finds the same one.
// - CommonJS dependencies bundled into ES modules call `require` for Node's
//   built-ins; each output file makes one with createRequire.
// better-sqlite3 stays outside: it loads its native addon from its own folder.
import { build, type Plugin } from 'esbuild';
import { copyFile, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { BUNDLE_DIR, DIST_ROOT, PROGRAMS, programImports } from '../shared/entry-points.js';

const MODULE_URL = '__custodyModuleUrl';

/** `import.meta.url` in a module of dist/ becomes the URL of that module's file. */
const moduleUrls: Plugin = {
  name: 'module-urls',
  setup(builder) {
    builder.onLoad({ filter: /\.js$/ }, async (args) => {
      if (!args.path.startsWith(DIST_ROOT + path.sep)) return undefined;
      const text = await readFile(args.path, 'utf8');
      if (!text.includes('import.meta.url')) return undefined;
      const relative = path.relative(DIST_ROOT, args.path).split(path.sep).join('/');
      return { contents: text.replaceAll('import.meta.url', `${MODULE_URL}(${JSON.stringify(relative)})`), loader: 'js', resolveDir: path.dirname(args.path) };
    });
  },
};

/**
 * shared/inspector-guard.js stays a file of its own beside the programs, an
 * external import of each, and that import is moved to the top: with
 * splitting, esbuild puts an entry's chunk imports before its external ones,
 * and the guard's SIGUSR1 listener must be installed before any other module
 * of the program runs (docs/SECURITY.md "Signals"). The guard imports
 * nothing, so the program's first import evaluates it first. The source
 * map's line moves with it.
 */
const GUARD_FILE = 'inspector-guard.js';
/** The program's import of the guard, on one line: `import "./inspector-guard.js";` or with named bindings. */
const GUARD_IMPORT = /^import (?:\{[^}\n]*\} from )?"\.\/inspector-guard\.js";$/;

const guardApart: Plugin = {
  name: 'inspector-guard-apart',
  setup(builder) {
    builder.onResolve({ filter: /(^|\/)inspector-guard\.js$/ }, () => ({ path: `./${GUARD_FILE}`, external: true }));
  },
};

function moveLine<T>(items: T[], from: number, to: number): void {
  const [item] = items.splice(from, 1);
  items.splice(to, 0, item!);
}

async function guardFirst(outdir: string, programs: readonly string[]): Promise<void> {
  for (const suffix of ['', '.map']) await copyFile(path.join(DIST_ROOT, 'shared', GUARD_FILE + suffix), path.join(outdir, GUARD_FILE + suffix));
  for (const name of programs) {
    const file = path.join(outdir, `${name}.js`);
    const lines = (await readFile(file, 'utf8')).split('\n');
    const from = lines.findIndex((line) => GUARD_IMPORT.test(line));
    // Right after the banner (scripts/bundle.ts `banner`), which imports only node:module.
    const to = lines.findIndex((line) => line.includes('__custodyCreateRequire(import.meta.url)')) + 1;
    if (from < 0 || to <= 0) throw new Error(`dist/bundle/${name}.js: no one-line import of ./${GUARD_FILE}, or no banner to put it after (scripts/bundle.ts)`);
    moveLine(lines, from, to);
    await writeFile(file, lines.join('\n'));
    const map = JSON.parse(await readFile(`${file}.map`, 'utf8')) as { mappings: string };
    const mapped = map.mappings.split(';');
    moveLine(mapped, from, to);
    map.mappings = mapped.join(';');
    await writeFile(`${file}.map`, JSON.stringify(map));
    const first = programImports(lines.join('\n'))[0];
    if (first !== `./${GUARD_FILE}`) throw new Error(`dist/bundle/${name}.js imports ${first} before ./${GUARD_FILE}: SIGUSR1 could open the inspector while it loads (scripts/bundle.ts)`);
  }
}

/** The first lines of every output file in `outdir` (a folder below dist/). */
function banner(outdir: string): string {
  const up = path.relative(outdir, DIST_ROOT).split(path.sep).join('/') + '/';
  return [
    "import { createRequire as __custodyCreateRequire } from 'node:module';",
    'const require = __custodyCreateRequire(import.meta.url);',
    `const ${MODULE_URL} = (relative) => new URL(${JSON.stringify(up)} + relative, import.meta.url).href;`,
  ].join(' ');
}

/**
 * Test fixtures the suite starts as processes, bundled the same way into
 * dist/test/bundle/ (outside the package's files): the JSONTestSuite test
 * starts a wire child for each of its 235 files, and a bundle starts in
 * about three quarters of the module entry's CPU.
 */
const TEST_PROGRAMS = { 'wire-child': 'test/fixtures/wire-child.js' } as const;
const TEST_BUNDLE_DIR = path.join(DIST_ROOT, 'test', 'bundle');

async function bundlePrograms(programs: Readonly<Record<string, string>>, outdir: string, guarded: boolean): Promise<{ files: number; ms: number }> {
  const started = performance.now();
  await rm(outdir, { recursive: true, force: true });
  const result = await build({
    entryPoints: Object.fromEntries(Object.entries(programs).map(([name, entry]) => [name, path.join(DIST_ROOT, entry)])),
    outdir,
    bundle: true,
    splitting: true, // the CLI's lazy imports stay lazy; the programs share chunks
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: ['better-sqlite3'],
    banner: { js: banner(outdir) },
    plugins: guarded ? [guardApart, moduleUrls] : [moduleUrls],
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
  });
  if (guarded) await guardFirst(outdir, Object.keys(programs));
  const files = Object.keys(result.metafile.outputs).filter((file) => file.endsWith('.js')).length;
  return { files, ms: performance.now() - started };
}

for (const [programs, outdir, guarded] of [
  [PROGRAMS, BUNDLE_DIR, true],
  [TEST_PROGRAMS, TEST_BUNDLE_DIR, false],
] as const) {
  const { files, ms } = await bundlePrograms(programs, outdir, guarded);
  process.stderr.write(`bundled ${Object.keys(programs).join(', ')} into ${path.relative(process.cwd(), outdir) || outdir} (${files} files, ${ms.toFixed(0)} ms)\n`);
}
