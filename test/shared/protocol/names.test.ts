// Request ids and operation names: one charset, one length, one schema.
import { expect } from 'chai';
import { identifier } from '../../../shared/protocol/common.js';
import { checkOperationName, operationName } from '../../../shared/protocol/names.js';
import { codeOf } from '../../helpers/codes.js';

describe('operation names', () => {
  const accepted = ['note-1', 'a', 'A9', 'req-m3x.1:2_b', '9', 'x'.repeat(128), 'a..b'];
  const refused: Array<[string, string]> = [
    ['a/../../../evil', 'a path with parent segments'],
    ['a/../../x', 'a slash'],
    ['.hidden', 'a leading dot'],
    ['..', 'the parent directory'],
    ['', 'empty'],
    ['x'.repeat(129), 'one character past 128'],
    ['a\u0000b', 'a NUL'],
    ['a b', 'a space'],
    ['a@b', 'an at sign (a wire identifier allows it, a name does not)'],
    ['-a', 'a leading dash (an option on a command line)'],
    ['é', 'a letter outside ASCII'],
    ['a\nb', 'a newline'],
  ];

  for (const name of accepted) {
    it(`accepts ${JSON.stringify(name.length > 20 ? `${name.slice(0, 10)}…(${name.length})` : name)}, which is also a wire identifier`, () => {
      expect(operationName.safeParse(name).success).to.equal(true);
      expect(identifier.safeParse(name).success, 'every name is an identifier, so no child refuses it').to.equal(true);
    });
  }

  for (const [name, why] of refused) {
    it(`refuses ${why} with name_invalid`, () => {
      expect(codeOf(() => checkOperationName(name, '--request-id'))).to.equal('name_invalid');
    });
  }
});
