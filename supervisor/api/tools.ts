// GET /v1/tools (agent token): the tools an agent can call now — those an
// executor serves (its adapters' declarations, asked with `tools`) and that a
// live grant covers for the subject (default `agent`, the subject of
// POST /v1/invoke). Read-only: it reserves nothing, and a tool listed here
// can still be refused (the grant may run out between listing and calling).
import type { z } from 'zod';
import { nowMs } from '../../shared/clock.js';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import type { CapabilityBody } from '../../shared/protocol/artifacts.js';
import { identifier, toolPatternCovers } from '../../shared/protocol/common.js';
import type { Service } from '../service.js';
import type { toolsAnswer } from './answers.js';
import { kernelGrants } from './handlers.js';

const TOOLS_TIMEOUT_MS = 5_000;
/** How long a listing waits for an executor that has no session (restarting) before naming it unavailable. */
const TOOLS_SESSION_WAIT_MS = 2_000;

type ToolsAnswer = z.infer<typeof toolsAnswer>;
type ToolEntry = ToolsAnswer['tools'][number];

export async function listTools(service: Service, query: URLSearchParams): Promise<{ body: ToolsAnswer }> {
  const subject = query.get('subject') ?? 'agent';
  if (!identifier.safeParse(subject).success) throw new CustodyError('bad_request', `subject ${JSON.stringify(subject)} is not an identifier; omit it for the agent's subject`);
  const now = nowMs();
  const grants = await kernelGrants(service, true);
  const live = grants.flatMap((grant) => {
    const body = readEnvelope(grant.capability).envelope.body as CapabilityBody;
    const remaining = body.max_invocations - grant.invocations_used - grant.invocations_held;
    const usable = grant.revoked_at === null && body.not_before <= now && body.expires_at > now && remaining > 0 && (body.subject === '*' || body.subject === subject);
    return usable ? [{ capability_id: grant.capability_id, tool_pattern: body.tool, remaining_invocations: remaining, expires_at: body.expires_at }] : [];
  });
  const tools: ToolEntry[] = [];
  const unavailable: ToolsAnswer['unavailable'] = [];
  // Every executor at once, none waited for past a moment: one restarting is named unavailable, not waited out in turn.
  const answers = await Promise.all(
    service.config.executors.map(async (executor) => {
      const handle = service.executors.get(executor.name);
      if (!handle) return null;
      try {
        return { executor, served: (await handle.request('tools', {}, { timeoutMs: TOOLS_TIMEOUT_MS, waitMs: TOOLS_SESSION_WAIT_MS })).tools, reason: null };
      } catch (error) {
        return { executor, served: null, reason: toCustodyError(error).message };
      }
    }),
  );
  for (const answer of answers) {
    if (!answer) continue;
    if (answer.served === null) {
      unavailable.push({ executor: answer.executor.name, reason: answer.reason });
      continue;
    }
    const { executor, served } = answer;
    for (const tool of served) {
      if (!executor.tools.some((pattern) => toolPatternCovers(pattern, tool.tool))) continue;
      if (tools.some((t) => t.tool === tool.tool)) continue;
      const covering = live.filter((grant) => toolPatternCovers(grant.tool_pattern, tool.tool));
      if (covering.length === 0) continue;
      tools.push({ ...tool, executor: executor.name, grants: covering });
    }
  }
  tools.sort((a, b) => a.tool.localeCompare(b.tool));
  return { body: { subject, tools, unavailable } };
}
