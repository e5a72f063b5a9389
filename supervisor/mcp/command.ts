// The `custody mcp` command: where the service is and which token to use,
// then MCP on stdio until the host closes stdin.
import { CustodyError } from '../../shared/errors.js';
import { createLogger } from '../../shared/log.js';
import { CustodyClient } from '../client/index.js';
import { readTokenFile } from '../tokens.js';
import { refuseControlToken, serveMcpOnStdio } from './server.js';

export interface McpCommandOptions {
  readonly state: string;
  readonly url?: string;
  readonly tokenFile?: string;
  readonly waitMs?: number;
  /** The client's answerTimeoutMs (the CLI's --answer-timeout). */
  readonly answerTimeoutMs?: number;
}

/**
 * How long `custody mcp` waits for the service beyond a call's own wait when
 * the CLI's --answer-timeout is not given: with the call's 50 s wait, an
 * agent host's usual 60 s request timeout still hears custody's answer (a
 * stopped service: "not known, call again") rather than its own timeout.
 */
export const MCP_ANSWER_TIMEOUT_MS = 8_000;

export async function mcpCommand(given: McpCommandOptions): Promise<number> {
  const options = { ...given, answerTimeoutMs: given.answerTimeoutMs ?? MCP_ANSWER_TIMEOUT_MS };
  const log = createLogger({ component: 'mcp' });
  let client: () => CustodyClient;
  let ready: () => Promise<void> = () => Promise.resolve();
  if (options.url !== undefined || options.tokenFile !== undefined) {
    if (options.url === undefined || options.tokenFile === undefined) throw new CustodyError('usage', 'custody mcp: --url and --token-file go together (or give --state DIR instead)');
    if (!/^http:\/\/(127\.0\.0\.1|localhost|\[::1\]):\d+\/?$/.test(options.url)) {
      throw new CustodyError('usage', `custody mcp: --url ${options.url} is not a local service address such as http://127.0.0.1:7410`);
    }
    const fixed = new CustodyClient({ url: options.url, token: readTokenFile(options.tokenFile), answerTimeoutMs: options.answerTimeoutMs });
    client = () => fixed;
    // The control token is refused at the first request (the service may not be up at launch).
    let checked: Promise<void> | null = null;
    ready = () =>
      (checked ??= refuseControlToken(fixed).catch((error: unknown) => {
        checked = null;
        throw error;
      }));
  } else {
    // The address is read from service.json at each request: a restarted service is found again.
    client = () => CustodyClient.fromState(options.state, { role: 'agent', answerTimeoutMs: options.answerTimeoutMs });
  }
  await serveMcpOnStdio({ client, ready, log, version: '0.1.0', ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }) });
  return 0;
}
