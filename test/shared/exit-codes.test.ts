// The exit statuses in shared/exit-codes.ts are the ones the documents list:
// a status added, changed or dropped on one side only fails here.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { CHILD_EXIT, CLI_EXIT } from '../../shared/exit-codes.js';
import { exitCodeForError } from '../../supervisor/cli/exit-codes.js';
import { REPO_ROOT } from '../helpers/vectors.js';

/** The numeric first cells of the first table under `heading` in a Markdown file. */
function statusesListed(file: string, heading: string): number[] {
  const text = readFileSync(path.join(REPO_ROOT, file), 'utf8');
  const start = text.indexOf(heading);
  expect(start, `${file} has ${heading}`).to.be.greaterThan(-1);
  const rows = text.slice(start).split('\n').slice(1);
  const table = rows.slice(rows.findIndex((line) => line.startsWith('|')));
  const body = table.slice(0, table.findIndex((line) => !line.startsWith('|')));
  return body.map((line) => Number(line.split('|')[1]!.trim())).filter((n) => Number.isInteger(n));
}

const values = (codes: Record<string, number>) => [...new Set(Object.values(codes))].sort((a, b) => a - b);

describe('exit statuses', () => {
  it("a child's are exactly the ones docs/PROTOCOL.md §10 lists", () => {
    expect(statusesListed('docs/PROTOCOL.md', '## 10. Exit statuses of a child')).to.deep.equal(values(CHILD_EXIT));
  });

  it("the CLI's are exactly the ones README lists under Exit codes", () => {
    expect(statusesListed('README.md', '### Exit codes')).to.deep.equal(values(CLI_EXIT));
  });

  it("a dropped reply ends the CLI with the executor's own drill status", () => {
    expect(exitCodeForError('reply_dropped')).to.equal(CHILD_EXIT.dropReply);
  });
});
