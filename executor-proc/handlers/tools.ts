// `tools`: what this executor serves, as its adapters declare it, so the
// supervisor can tell agents which tools exist and what arguments they take
// (GET /v1/tools, `custody mcp`). `arguments.check`: the adapter's own
// argument check (byte bound, then schema), the one execute runs first, asked
// by the supervisor before it reserves anything, so a call that cannot run is
// refused with its cause and no hold is placed. Both are read-only.
import { parametersDigest } from '../../shared/protocol/binding.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { type ExecutorContext, runnableAdapter } from '../context.js';
import { validateArguments } from './execute.js';

export function listTools(context: ExecutorContext): ResultOf<'tools'> {
  const tools = [...context.host.descriptors.values()]
    .filter((d) => d.contract !== null)
    .slice(0, 256)
    .map((d) => ({ tool: d.tool, contract: d.contract, description: d.description, input_schema: d.inputSchema, max_argument_bytes: d.maxArgumentBytes }));
  return { tools };
}

export async function checkToolArguments(context: ExecutorContext, body: RequestOf<'arguments.check'>): Promise<ResultOf<'arguments.check'>> {
  const descriptor = runnableAdapter(context, body.tool);
  const generation = context.host.generation;
  await validateArguments(context, descriptor, body.arguments);
  // Kept for the execute that follows, if the host that answered is still the one running (admitted-arguments.ts).
  if (context.host.generation === generation) context.admitted.remember(body.tool, parametersDigest(body.arguments), generation);
  return { tool: body.tool, admitted: true };
}
