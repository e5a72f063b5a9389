// Names a caller chooses: request ids (`--request-id`, `request_id`) and
// operation names (`--operation`, `operation`, NAME in a path or command).
// They end up in file names (`custody receipt export`), URL paths, logs and
// stores, so they have one charset, defined here and used by the API and the
// CLI alike: letters, digits and `- _ . :`, 1 to 128 characters, starting
// with a letter or digit (so never with a dot). No `/`, no `..` segment, no
// NUL, nothing a shell or a file system reads specially. Every such name is
// also a wire `identifier` (common.ts), so no child ever refuses one.
// (docs/SECURITY.md "Names".)
import { z } from 'zod';
import { CustodyError } from '../errors.js';

export const NAME_MAX_CHARS = 128;

export const NAME_RULE = 'letters, digits and - _ . : only, 1 to 128 characters, starting with a letter or digit';

/** A request id or operation name. */
export const operationName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, `expected a name of ${NAME_RULE}`);

/** Refuse a name with `name_invalid`, naming where it came from, the value and the rule. */
export function checkOperationName(value: string, where: string): string {
  if (operationName.safeParse(value).success) return value;
  const shown = JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  throw new CustodyError('name_invalid', `${where} ${shown} is not a valid name: use ${NAME_RULE}`);
}
