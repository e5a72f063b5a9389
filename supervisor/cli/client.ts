// The CLI's way to the running service: the state directory says where it
// listens (supervisor/service.json) and holds the tokens. A missing service
// is `service_unavailable` (exit 5), never a stack trace.
import type { z } from 'zod';
import { CustodyError, isCustodyError } from '../../shared/errors.js';
import { describeIssues } from '../../shared/wire/session.js';
import { CustodyClient, repeatable, resetUnanswered } from '../client/index.js';
import { type StatePaths, statePaths } from '../paths.js';
import { readTokenFile } from '../tokens.js';
import { readServiceFile } from '../service-file.js';

/**
 * Each call names the schema of the answer it expects (supervisor/api/answers.ts,
 * the ones the OpenAPI description is made of): the body is checked against
 * it and comes back typed, so no command casts what the service said.
 */
export interface ServiceClient {
  readonly paths: StatePaths;
  get<S extends z.ZodType>(path: string, answer: S): Promise<ClientAnswer<z.output<S>>>;
  post<S extends z.ZodType>(path: string, body: unknown, answer: S): Promise<ClientAnswer<z.output<S>>>;
  delete<S extends z.ZodType>(path: string, answer: S): Promise<ClientAnswer<z.output<S>>>;
}

export interface ClientAnswer<T> {
  readonly status: number;
  readonly body: T;
}

/** An answer of the shape its route describes, or internal naming the route and what differs. */
function checkedAnswer<S extends z.ZodType>(method: string, path: string, answer: { status: number; body: unknown }, schema: S): ClientAnswer<z.output<S>> {
  const checked = schema.safeParse(answer.body);
  if (!checked.success) {
    throw new CustodyError('internal', `the service's answer to ${method} ${path} is not the shape it describes (${describeIssues(checked.error)}); is the running service from another build? stop it (SIGTERM) and custody start it again from this one`);
  }
  return { status: answer.status, body: checked.data };
}

/**
 * Every page of a listing (GET /v1/operations, /v1/grants), each asked for
 * after the previous answer's next_after, as its answers come: `path` holds
 * the query the listing takes (at least its limit).
 */
export async function* pagesOf<S extends z.ZodType<{ next_after: string | null }>>(client: ServiceClient, path: string, answer: S): AsyncGenerator<z.output<S>> {
  let after: string | null = null;
  do {
    const { body }: { body: z.output<S> } = await client.get(after === null ? path : `${path}&after=${encodeURIComponent(after)}`, answer);
    yield body;
    after = body.next_after;
  } while (after !== null);
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

export function connect(stateDir: string, options: { answerTimeoutMs?: number } = {}): ServiceClient {
  const paths = statePaths(stateDir);
  // The service's address and the token are read at each call (the service
  // may have restarted); the typed client (supervisor/client) does the HTTP,
  // retrying a transport failure with the same body, a request's name fixed.
  const call = async <S extends z.ZodType>(method: 'GET' | 'POST' | 'DELETE', path: string, body: unknown, schema: S): Promise<ClientAnswer<z.output<S>>> => {
    const { port } = readServiceFile(paths);
    const client = new CustodyClient({ url: `http://127.0.0.1:${port}`, token: readToken(paths), retries: 2, retryDelayMs: 100, answerTimeoutMs: options.answerTimeoutMs });
    try {
      return checkedAnswer(method, path, await client.request(method, path, body), schema);
    } catch (error) {
      if (isCustodyError(error, 'service_unavailable')) {
        const reset = resetUnanswered(error.cause);
        throw new CustodyError('service_unavailable', reset ? `${error.message} (${paths.root})` : `${error.message} (${paths.root}); is custody running? custody start --state ${paths.root}`, { cause: error });
      }
      if (isCustodyError(error, 'outcome_unknown')) {
        // A rotation or a restart asked again would act a second time: look first.
        const next = repeatable(method, path) ? 'ask again with the same name' : 'it may have been carried out: look at custody status (restarts) or the service log (kernel_key_rotated, executor_key_rotated) before asking again, since a repeat would act a second time';
        throw new CustodyError('outcome_unknown', `${error.message} — ${next}`, { cause: error });
      }
      throw error;
    }
  };
  return {
    paths,
    get: (path, answer) => call('GET', path, undefined, answer),
    post: (path, body, answer) => call('POST', path, body ?? {}, answer),
    delete: (path, answer) => call('DELETE', path, undefined, answer),
  };
}
