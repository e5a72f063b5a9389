// Lint rules that carry the project's structure (STYLE.md): process folders
// import only from shared/ and themselves, promises are never left floating,
// type imports are explicit (and load nothing), and only entry files may call process.exit.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const boundary = (forbidden) => ({
  'no-restricted-imports': ['error', {
    patterns: forbidden.map((dir) => ({
      group: [`**/${dir}/**`, `../${dir}/*`, `../../${dir}/*`],
      message: `process folders talk to ${dir}/ only through the wire; import from shared/ instead`,
    })),
  }],
});

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'custody-state/**', 'eslint.config.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      // verbatimModuleSyntax keeps `import { type X } from 'm'` as `import {} from 'm'`:
      // m is loaded and run for a type. `import type` loads nothing, so a
      // process (and every CLI call) loads only what it runs (docs/PERFORMANCE.md "CLI start").
      '@typescript-eslint/no-import-type-side-effects': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/only-throw-error': 'error',
      'no-restricted-properties': ['error', {
        object: 'process', property: 'exit',
        message: 'only entry files (main.ts) may end the process',
      }],
    },
  },
  { files: ['shared/**/*.ts'], rules: boundary(['kernel-proc', 'executor-proc', 'supervisor']) },
  { files: ['kernel-proc/**/*.ts'], rules: boundary(['executor-proc', 'supervisor']) },
  { files: ['executor-proc/**/*.ts'], rules: boundary(['kernel-proc', 'supervisor']) },
  { files: ['supervisor/**/*.ts'], rules: boundary(['kernel-proc', 'executor-proc']) },
  {
    files: ['**/main.ts', 'test/fixtures/**/*.ts', 'scripts/**/*.ts'],
    rules: { 'no-restricted-properties': 'off' },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unused-expressions': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
