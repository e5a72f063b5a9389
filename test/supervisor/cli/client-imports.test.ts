// A client command (`custody invoke`, `status`, …) asks the service over
// HTTP: it must not load the service, the stores or the metrics at every call
// (supervisor/cli/main.ts). The static import graph of the built CLI is
// walked from its entry, each file read with TypeScript's parser: what a
// command imports with `import()` when it runs is not followed, `import type`
// is gone from the JavaScript, and a bare `import {} from` (a type imported
// inline under verbatimModuleSyntax) still loads its module and is followed.
import { expect } from 'chai';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { distPath } from '../../helpers/children.js';

/** The specifiers of a built file's import and export declarations (read by TypeScript's parser: comments and line breaks anywhere). */
function staticSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.JS);
  return source.statements.flatMap((statement) =>
    (ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) && statement.moduleSpecifier && ts.isStringLiteral(statement.moduleSpecifier)
      ? [statement.moduleSpecifier.text]
      : [],
  );
}

/** Every module the entry loads before it runs: relative files by path under dist, packages by name. */
function staticallyLoaded(entry: string): Set<string> {
  const loaded = new Set<string>();
  const pending = [entry];
  for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
    for (const specifier of staticSpecifiers(file)) {
      if (!specifier.startsWith('.')) {
        loaded.add(specifier);
        continue;
      }
      const next = path.resolve(path.dirname(file), specifier);
      if (loaded.has(next) || !existsSync(next)) continue;
      loaded.add(next);
      pending.push(next);
    }
  }
  return new Set([...loaded].map((m) => (path.isAbsolute(m) ? path.relative(distPath(), m) : m)));
}

describe('the custody CLI entry', () => {
  const loaded = staticallyLoaded(distPath('supervisor', 'cli', 'main.js'));

  it('loads the HTTP client and its answers schemas', () => {
    expect(loaded).to.include('supervisor/client/index.js');
    expect(loaded).to.include('supervisor/api/answers.js');
    expect(loaded).to.include('commander');
  });

  it('does not load the service, a store, the metrics, the MCP server or the export stream before a command that needs them runs', () => {
    const heavy = [...loaded].filter((m) =>
      ['better-sqlite3', 'prom-client', '@modelcontextprotocol/sdk', 'ndjson'].some((p) => m === p || m.startsWith(`${p}/`)) ||
      ['supervisor/service.js', 'supervisor/init.js', 'supervisor/metrics/', 'supervisor/store/', 'supervisor/mcp/', 'supervisor/cli/offline-trace.js'].some((p) => m.startsWith(p)),
    );
    expect(heavy).to.deep.equal([]);
  });
});
