// The CLI's way to the running service: the state directory says where it
// listens (supervisor/service.json) and holds the tokens. A missing service
// is `service_unavailable` (exit 5), never a stack trace.
import { readFileSync } from 'node:fs';
import { CustodyError, isCustodyError } from '../../shared/errors.js';
import { CustodyClient } from '../client/index.js';
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
  // The service's address and the token are read at each call (the service
  // may have restarted); the typed client (supervisor/client) does the HTTP,
  // retrying a transport failure with the same body, a request's name fixed.
  const call = async (method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown): Promise<ClientAnswer> => {
    const { port } = readServiceInfo(paths);
    const client = new CustodyClient({ url: `http://127.0.0.1:${port}`, token: readToken(paths), retries: 2, retryDelayMs: 100 });
    try {
      return await client.request(method, path, body);
    } catch (error) {
      if (isCustodyError(error, 'service_unavailable')) {
        throw new CustodyError('service_unavailable', `${error.message} (${paths.root}); is custody running? custody start --state ${paths.root}`, { cause: error });
      }
      if (isCustodyError(error, 'outcome_unknown')) throw new CustodyError('outcome_unknown', `${error.message} — ask again with the same name`, { cause: error });
      throw error;
    }
  };
  return {
    paths,
    get: (path) => call('GET', path),
    post: (path, body) => call('POST', path, body ?? {}),
    delete: (path) => call('DELETE', path),
  };
}
