// The CLI's way to the running service: the state directory says where it
// listens (supervisor/service.json) and holds the tokens. A missing service
// is `service_unavailable` (exit 5), never a stack trace.
import { readFileSync } from 'node:fs';
import { CustodyError, isErrorCode } from '../../shared/errors.js';
import { type StatePaths, statePaths } from '../paths.js';
import { readTokenFile } from '../tokens.js';

export interface ServiceClient {
  readonly paths: StatePaths;
  get(path: string): Promise<ClientAnswer>;
  post(path: string, body: unknown): Promise<ClientAnswer>;
  delete(path: string): Promise<ClientAnswer>;
}

export interface ClientAnswer {
  readonly status: number;
  readonly body: Record<string, unknown>;
}

function readServiceInfo(paths: StatePaths): { port: number; pid: number } {
  let text: string;
  try {
    text = readFileSync(paths.serviceJson, 'utf8');
  } catch {
    throw new CustodyError('service_unavailable', `custody is not running on ${paths.root} (no ${paths.serviceJson}); start it with: custody start --state ${paths.root}`);
  }
  let info: { port?: unknown; pid?: unknown };
  try {
    info = JSON.parse(text) as { port?: unknown; pid?: unknown };
  } catch {
    info = {};
  }
  if (typeof info.port !== 'number' || typeof info.pid !== 'number') throw new CustodyError('service_unavailable', `${paths.serviceJson} is damaged; restart custody`);
  return { port: info.port, pid: info.pid };
}

function readToken(paths: StatePaths): string {
  for (const file of [paths.controlToken, paths.agentToken]) {
    try {
      return readTokenFile(file);
    } catch {
      // the operator may hold only the agent token
    }
  }
  throw new CustodyError('unauthorized', `no readable private token in ${paths.supervisorDir} (control.token or agent.token, mode 0600)`);
}

export function connect(stateDir: string): ServiceClient {
  const paths = statePaths(stateDir);
  const call = async (method: string, path: string, body?: unknown): Promise<ClientAnswer> => {
    const { port } = readServiceInfo(paths);
    let response: Response;
    try {
      response = await fetch(`http://127.0.0.1:${port}${path}`, {
        method,
        headers: { authorization: `Bearer ${readToken(paths)}`, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (cause) {
      const code = (cause as { cause?: { code?: string } }).cause?.code;
      // Refused: nothing was sent. Anything else on a POST may have reached the
      // service, which then carries the request on: not "unreachable", not done.
      if (method === 'GET' || code === 'ECONNREFUSED' || code === 'ENOENT') {
        throw new CustodyError('service_unavailable', `custody does not answer on 127.0.0.1:${port} (${paths.root}): ${code ?? (cause as Error).message}`, { cause });
      }
      throw new CustodyError('outcome_unknown', `the connection to custody broke after the request was sent (${code ?? (cause as Error).message}); it may still complete — ask again with the same name`, { cause });
    }
    const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (response.status >= 400) {
      const code = typeof answer.code === 'string' && isErrorCode(answer.code) ? answer.code : 'internal';
      throw new CustodyError(code, typeof answer.message === 'string' ? answer.message : `HTTP ${response.status}`);
    }
    return { status: response.status, body: answer };
  };
  return {
    paths,
    get: (path) => call('GET', path),
    post: (path, body) => call('POST', path, body ?? {}),
    delete: (path) => call('DELETE', path),
  };
}
