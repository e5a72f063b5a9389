// The API tokens, in 0600 files of the supervisor directory. A token file
// anyone else can read is refused: the token is the control of the service.
import { readFileSync } from 'node:fs';
import { CustodyError } from '../shared/errors.js';
import { checkPrivateFile } from '../shared/store/private-fs.js';

export function readTokenFile(file: string): string {
  checkPrivateFile(file);
  const token = readFileSync(file, 'utf8').trim();
  if (!/^[0-9a-f]{64}$/.test(token)) throw new CustodyError('config_invalid', `${file} does not hold a token (64 lowercase hex characters)`);
  return token;
}
