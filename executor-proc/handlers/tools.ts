// `tools`: what this executor serves, as its adapters declare it, so the
// supervisor can tell agents which tools exist and what arguments they take
// (GET /v1/tools, `custody mcp`). Read-only; adapters that cannot run are left out.
import { type ResultOf } from '../../shared/protocol/messages.js';
import { type ExecutorContext } from '../context.js';

export function listTools(context: ExecutorContext): ResultOf<'tools'> {
  const tools = [...context.host.descriptors.values()]
    .filter((d) => d.contract !== null)
    .slice(0, 256)
    .map((d) => ({ tool: d.tool, contract: d.contract, description: d.description, input_schema: d.inputSchema, max_argument_bytes: d.maxArgumentBytes }));
  return { tools };
}
