// Locates the external conformance vectors in ../shared/vectors (beside the
// checkout). Under CI a missing folder fails the run; elsewhere the suites
// that need it skip, loudly.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root: dist/test/helpers/ → three levels up. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export const VECTORS_DIR = path.resolve(REPO_ROOT, '..', 'shared', 'vectors');

export function vectorsAvailable(): boolean {
  return existsSync(VECTORS_DIR);
}

/**
 * Call at the top of a describe() body that needs the vectors. Returns the
 * folder, or skips the suite with a warning on stderr when it is absent
 * outside CI. In CI (CI=true) absence throws, so the run fails.
 */
export function requireVectors(ctx: Mocha.Suite, sub = ''): string {
  const dir = path.join(VECTORS_DIR, sub);
  if (existsSync(dir)) return dir;
  if (process.env.CI === 'true') {
    throw new Error(`conformance vectors missing at ${dir}; CI requires ../shared/vectors beside the checkout`);
  }
  process.stderr.write(`\n*** SKIPPING "${ctx.title}": conformance vectors not found at ${dir} ***\n\n`);
  ctx.beforeAll(function skipWithoutVectors() {
    this.skip();
  });
  return dir;
}
