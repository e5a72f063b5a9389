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
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { BUNDLE_DIR, DIST_ROOT, PROGRAMS } from '../shared/entry-points.js';

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

async function bundlePrograms(programs: Readonly<Record<string, string>>, outdir: string): Promise<{ files: number; ms: number }> {
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
    plugins: [moduleUrls],
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
  });
  const files = Object.keys(result.metafile.outputs).filter((file) => file.endsWith('.js')).length;
  return { files, ms: performance.now() - started };
}

for (const [programs, outdir] of [
  [PROGRAMS, BUNDLE_DIR],
  [TEST_PROGRAMS, TEST_BUNDLE_DIR],
] as const) {
  const { files, ms } = await bundlePrograms(programs, outdir);
  process.stderr.write(`bundled ${Object.keys(programs).join(', ')} into ${path.relative(process.cwd(), outdir) || outdir} (${files} files, ${ms.toFixed(0)} ms)\n`);
}
