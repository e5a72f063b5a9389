// executor.statements is read bounded (executor-proc/key-statements.ts):
// a file of exactly STATEMENTS_MAX_BYTES is read, one byte more is refused
// with key_file_invalid before anything is read into memory.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { STATEMENTS_FILE, STATEMENTS_MAX_BYTES, readStatements } from '../../executor-proc/key-statements.js';

describe('executor.statements size bound', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-statements-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it(`reads a file of exactly ${STATEMENTS_MAX_BYTES} bytes and refuses one of a byte more`, () => {
    const file = path.join(dir, STATEMENTS_FILE);
    // Lines of "x", newline-terminated: the bound's worth of text.
    fs.writeFileSync(file, Buffer.alloc(STATEMENTS_MAX_BYTES, 'x\n'), { mode: 0o600 });
    expect(readStatements(dir)).to.have.length(STATEMENTS_MAX_BYTES / 2);
    fs.appendFileSync(file, 'x');
    expect(() => readStatements(dir)).to.throw(/more than the 4194304 it may be/).with.property('code', 'key_file_invalid');
  });
});
