// A supervisor's client channel and a kernel's server channel joined in
// memory, past the hello: the wire tests' live channel without a process.
import { PassThrough, type Writable } from 'node:stream';
import { Signer, generateSeed } from '../../shared/crypto/ed25519.js';
import type { CustodyError } from '../../shared/errors.js';
import { createLogger } from '../../shared/log.js';
import { ClientChannel } from '../../shared/wire/client.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { signHello } from '../../shared/wire/hello.js';
import { type RequestHandler, ServerChannel } from '../../shared/wire/server.js';
import { SessionEndpoint } from '../../shared/wire/session.js';
import { createSessionSecrets } from '../../shared/wire/session-keys.js';

const quiet = createLogger({}, { write: () => undefined });

export interface PairOptions {
  readonly clientBound?: number;
  readonly serverBound?: number;
  /** The kernel's answer to each request. Default: the body back. */
  readonly handler?: RequestHandler;
  readonly onServerEnd?: (reason: CustodyError) => void;
  /** End the server's output when it terminates, as a child process exits after poisoning: the client's requests then fail. */
  readonly closeOnServerEnd?: boolean;
  /** Put something between the client's output and the server's input; given the server's input, returns the client's output. */
  readonly clientOutput?: (toServer: PassThrough) => Writable;
}

export async function channelPair(options: PairOptions = {}): Promise<{ client: ClientChannel; server: ServerChannel }> {
  const secrets = createSessionSecrets();
  const toServer = new PassThrough();
  const toClient = new PassThrough();
  const server = new ServerChannel({
    input: toServer,
    output: toClient,
    endpoint: new SessionEndpoint({ secrets, side: 'child', self: 'kernel', peer: 'supervisor', limits: DEFAULT_FRAME_LIMITS }),
    log: quiet,
    role: 'kernel',
    maxInFlight: options.serverBound ?? 16,
    onTerminated: (reason) => {
      options.onServerEnd?.(reason);
      if (options.closeOnServerEnd) toClient.end();
    },
    handler: options.handler ?? ((_kind, body) => Promise.resolve(body)),
  });
  const client = new ClientChannel({
    input: toClient,
    output: options.clientOutput ? options.clientOutput(toServer) : toServer,
    endpoint: new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: DEFAULT_FRAME_LIMITS }),
    log: quiet,
    peerRole: 'kernel',
    maxInFlight: options.clientBound ?? 16,
  });
  client.start();
  server.start(signHello(Signer.fromSeed(generateSeed()), secrets.sid, 'c'.repeat(64), { role: 'kernel', id: 'kernel', keyEpoch: 1 }));
  await client.hello;
  return { client, server };
}
