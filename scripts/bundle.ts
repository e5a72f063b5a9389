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

// Every output file sits in dist/bundle/, one folder below dist/.
const BANNER = [
  "import { createRequire as __custodyCreateRequire } from 'node:module';",
  'const require = __custodyCreateRequire(import.meta.url);',
  `const ${MODULE_URL} = (relative) => new URL('../' + relative, import.meta.url).href;`,
].join(' ');

async function bundlePrograms(): Promise<{ files: number; ms: number }> {
  const started = performance.now();
  await rm(BUNDLE_DIR, { recursive: true, force: true });
  const result = await build({
    entryPoints: Object.fromEntries(Object.entries(PROGRAMS).map(([name, entry]) => [name, path.join(DIST_ROOT, entry)])),
    outdir: BUNDLE_DIR,
    bundle: true,
    splitting: true, // the CLI's lazy imports stay lazy; the programs share chunks
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: ['better-sqlite3'],
    banner: { js: BANNER },
    plugins: [moduleUrls],
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
  });
  const files = Object.keys(result.metafile.outputs).filter((file) => file.endsWith('.js')).length;
  return { files, ms: performance.now() - started };
}

const { files, ms } = await bundlePrograms();
process.stderr.write(`bundled ${Object.keys(PROGRAMS).join(', ')} into ${path.relative(process.cwd(), BUNDLE_DIR) || BUNDLE_DIR} (${files} files, ${ms.toFixed(0)} ms)\n`);
