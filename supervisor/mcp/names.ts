// How custody tool names become MCP tool names and back. MCP allows only
// letters, digits, `_`, `-` and `.` (at most 128 characters); custody tool
// names are `/`-separated segments of [a-z0-9_.-]. The mapping replaces each
// `/` with `__`: review-notes/append ⇄ review-notes__append. It is reversible
// for every tool whose name has no `__` of its own and no segment beginning or
// ending with `_`; any other (or one whose mapped name would be longer than
// 128) is not offered over MCP, so two tools can never share an MCP name and
// every name offered calls its tool.
import { toolName } from '../../shared/protocol/common.js';

export const MCP_NAME_MAX = 128;

/** The MCP name of a custody tool, or null when the tool cannot be offered over MCP (and why). */
export function mcpNameOf(tool: string): { name: string } | { refused: string } {
  if (tool.includes('__')) return { refused: `tool ${tool} contains "__", which the MCP name mapping (/ → __) reserves` };
  // pay_/refund would map to pay___refund, which reads back as pay/_refund.
  if (tool.split('/').some((segment) => segment.startsWith('_') || segment.endsWith('_'))) {
    return { refused: `tool ${tool} has a segment that begins or ends with "_", which the MCP name mapping (/ → __) could not read back` };
  }
  const name = tool.replaceAll('/', '__');
  if (name.length > MCP_NAME_MAX) return { refused: `tool ${tool} maps to an MCP name of ${name.length} characters; MCP allows at most ${MCP_NAME_MAX}` };
  return { name };
}

/** The custody tool an MCP name stands for, or null when no custody tool maps to it. */
export function toolOfMcpName(name: string): string | null {
  const tool = name.replaceAll('__', '/');
  if (!toolName.safeParse(tool).success) return null;
  const back = mcpNameOf(tool);
  return 'name' in back && back.name === name ? tool : null;
}
