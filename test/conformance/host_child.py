#!/usr/bin/env python3
"""Host a real custody kernel child from docs/PROTOCOL.md alone.

An outside implementation of the supervisor's end of the wire, in Python 3
with the standard library only: it launches the built kernel
(`node dist/kernel-proc/main.js --dir DIR`, PROTOCOL.md §11.1) on a fresh
directory, provisions it, serves it, and checks what the document promises:

  1. provision: preamble -> hello (verified with Ed25519, RFC 8032) -> pin
     the identity it proves -> ping/pong -> a kind no kernel serves is
     `unexpected_message`: nothing more on stdout, exit 70, the code in the
     stderr log (`channel_poisoned`);
  2. serve: the hello proves the pinned identity; shutdown answers {} and
     the child exits 0;
  3. serve with a 1024-byte frame bound: a result too large for it is
     answered `error` `frame_too_large` and the channel stays open; then a
     correctly MAC'd frame whose envelope members are out of order is
     `frame_malformed`: nothing more on stdout, exit 70, logged;
  4. provision again: refused with one `fatal` frame (store_exists), exit 78;
  5. with --executor: provision an executor pinning that kernel (its hello id
     is its preamble name), ping it, end it by closing stdin (exit 0), then
     serve it and check its hello against the pin.

Before hosting, it checks its own Ed25519 against RFC 8032's test 1 and, with
--vectors, replays each role's chain of docs/vectors/protocol.json (preamble ->
hello -> ping -> pong under one session) with these same functions.

Usage: host_child.py --node NODE --kernel PATH/TO/kernel-proc/main.js
                     [--executor PATH/TO/executor-proc/main.js] [--vectors docs/vectors/protocol.json]
Prints one line per check; exits 0 when all pass, 1 on the first failure.
"""
import argparse
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile

# --------------------------------------------------------------- Ed25519
# Verification as in RFC 8032 §6 (reference code), cofactorless, with the
# checks of PROTOCOL.md §7.3 that matter for a hello: canonical encodings and
# S < L. (Small-order keys are not screened here; the kernel's own key is
# what is being verified.)

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % P
    bb = (y1 + x1) * (y2 + x2) % P
    cc = 2 * t1 * t2 * D % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, point):
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = _add(q, point)
        point = _add(point, point)
        s >>= 1
    return q


def _equal(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def _recover_x(y, sign):
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P)
    if x2 % P == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


def _decompress(data):
    if len(data) != 32:
        return None
    y = int.from_bytes(data, 'little')
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


_GY = 4 * pow(5, P - 2, P) % P
_G = (_recover_x(_GY, 0), _GY, 1, _recover_x(_GY, 0) * _GY % P)


def ed25519_verify(public, message, signature):
    if len(public) != 32 or len(signature) != 64:
        return False
    a = _decompress(public)
    r = _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], 'little')
    if s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), 'little') % L
    return _equal(_mul(s, _G), _add(r, _mul(k, a)))


# --------------------------------------------------------------- the wire


def hkdf_sha256(ikm, salt, info, length=32):
    """RFC 5869: extract, then expand."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, counter = b'', b'', 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def jcs(value):
    """RFC 8785 for the values used here (ASCII strings, integers, objects): sorted keys, no whitespace."""
    return json.dumps(value, sort_keys=True, separators=(',', ':'), ensure_ascii=False).encode('utf-8')


HEADER = re.compile(
    rb'^\{"v":1,"sid":"([0-9a-f]{32})","seq":(0|[1-9][0-9]*),"from":"(supervisor|kernel|executor)",'
    rb'"kind":"([a-z][a-z0-9_.]{0,63})","id":"([A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127})","body":\{'
)
TRAILER = b',"mac":"'


def no_duplicates(pairs):
    names = [name for name, _ in pairs]
    if len(names) != len(set(names)):
        raise ValueError('duplicated member')
    return dict(pairs)


class Failure(Exception):
    pass


def check(condition, what):
    if not condition:
        raise Failure(what)


class Session:
    """The supervisor's end of one channel: PROTOCOL.md §4 and §5."""

    def __init__(self, argv, role, name, mode, settings=None, pins=None, max_frame_bytes=1048576):
        self.sid = secrets.token_bytes(16)
        self.key = secrets.token_bytes(32)
        self.challenge = secrets.token_bytes(32)
        self.role = role
        self.to_child = hkdf_sha256(self.key, self.sid, b'custody.v1 frame mac supervisor->child')
        self.to_supervisor = hkdf_sha256(self.key, self.sid, b'custody.v1 frame mac child->supervisor')
        self.send_seq = 0
        self.recv_seq = 0
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        preamble = {
            'custody': 'custody.preamble.v1',
            'sid': self.sid.hex(),
            'key': self.key.hex(),
            'role': role,
            'name': name,
            'challenge': self.challenge.hex(),
            'mode': mode,
            'pins': pins or {'kernel': None},
            'limits': {'max_frame_bytes': max_frame_bytes, 'max_depth': 32},
            'settings': settings or {},
        }
        line = json.dumps(preamble, separators=(',', ':')).encode('utf-8')
        check(len(line) <= 4096, 'preamble fits 4096 bytes')
        self.proc.stdin.write(line + b'\n')
        self.proc.stdin.flush()

    def seal(self, kind, frame_id, body):
        covered = (
            b'{"v":1,"sid":"' + self.sid.hex().encode() + b'","seq":' + str(self.send_seq).encode()
            + b',"from":"supervisor","kind":"' + kind.encode() + b'","id":"' + frame_id.encode()
            + b'","body":' + json.dumps(body, separators=(',', ':'), ensure_ascii=False).encode('utf-8')
        )
        return covered

    def send_covered(self, covered):
        mac = hmac.new(self.to_child, covered, hashlib.sha256).hexdigest().encode()
        self.proc.stdin.write(covered + TRAILER + mac + b'"}\n')
        self.proc.stdin.flush()
        self.send_seq += 1

    def send(self, kind, frame_id, body):
        self.send_covered(self.seal(kind, frame_id, body))

    def receive(self):
        """The next frame from the child, checked in the order of §3; None at end of stream."""
        line = self.proc.stdout.readline()
        if line == b'':
            return None
        check(line.endswith(b'\n'), 'a frame ends with a newline')
        line = line[:-1]
        check(len(line) >= 74 and line[-74:-66] == TRAILER and line.endswith(b'"}'), 'a frame ends in the 74-byte MAC trailer')
        covered, mac = line[:-74], line[-66:-2]
        expected = hmac.new(self.to_supervisor, covered, hashlib.sha256).hexdigest().encode()
        check(hmac.compare_digest(mac, expected), 'the MAC verifies with key_to_supervisor')
        header = HEADER.match(covered)
        check(header is not None, 'the envelope members are in their one order')
        frame = json.loads(line.decode('utf-8'), object_pairs_hook=no_duplicates)
        check(list(frame) == ['v', 'sid', 'seq', 'from', 'kind', 'id', 'body', 'mac'], 'the envelope has exactly its members')
        check(frame['sid'] == self.sid.hex(), 'the frame names this session')
        check(frame['from'] == self.role, 'the frame comes from the child role')
        check(frame['seq'] == self.recv_seq, 'sequence numbers rise by one from 0')
        self.recv_seq += 1
        return frame

    def hello(self, pin=None):
        frame = self.receive()
        check(frame is not None, 'the child sends a first frame')
        check(frame['kind'] == 'hello' and frame['id'] == 'hello' and frame['seq'] == 0, 'the first frame is the hello')
        body = frame['body']
        check(list(body) == ['role', 'id', 'public_key', 'key_epoch', 'head', 'signature'], 'the hello body has its members')
        check(body['role'] == self.role, 'the hello claims the session role')
        signed = jcs({
            'custody': 'custody.hello.v1', 'sid': self.sid.hex(), 'challenge': self.challenge.hex(),
            'role': body['role'], 'id': body['id'], 'key_epoch': body['key_epoch'], 'head': body['head'],
        })
        check(ed25519_verify(bytes.fromhex(body['public_key']), signed, bytes.fromhex(body['signature'])), 'the hello signature verifies (Ed25519)')
        identity = {'id': body['id'], 'public_key': body['public_key'], 'key_epoch': body['key_epoch']}
        if pin is not None:
            check(identity == pin, 'the hello proves the pinned identity')
        return identity

    def request(self, kind, frame_id, body):
        self.send(kind, frame_id, body)
        frame = self.receive()
        # Head frames (§5) may come unasked before the answer: the store's head advanced.
        while frame is not None and frame['kind'] == 'head':
            check(list(frame['body']) == ['head'], 'a head frame carries only the head')
            frame = self.receive()
        check(frame is not None, f'{kind} is answered')
        check(frame['id'] == frame_id, 'the answer carries the request id')
        return frame

    def finish(self, timeout=15):
        """Close stdin, wait for the exit; returns (status, rest of stdout, stderr log records)."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        rest = self.proc.stdout.read()
        status = self.proc.wait(timeout=timeout)
        records = []
        for raw in self.proc.stderr.read().decode('utf-8', 'replace').splitlines():
            record = json.loads(raw)
            check(isinstance(record.get('ts'), str) and record.get('level') in ('debug', 'info', 'warn', 'error') and isinstance(record.get('event'), str),
                  'every stderr line is a JSON object with ts, level and event')
            records.append(record)
        return status, rest, records


def self_check():
    """RFC 8032 §7.1 test 1, and the same signature with one bit flipped."""
    public = bytes.fromhex('d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a')
    signature = bytes.fromhex(
        'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b')
    check(ed25519_verify(public, b'', signature), 'RFC 8032 test 1 verifies')
    check(not ed25519_verify(public, b'', signature[:-1] + bytes([signature[-1] ^ 1])), 'a flipped signature bit does not verify')
    check(not ed25519_verify(public, b'x', signature), 'another message does not verify')


def replay_chain(role, chain):
    """A host's view of a published chain: the preamble gives the keys; hello, ping and pong must check out."""
    preamble = json.loads(chain['preamble_line'])
    check(preamble['role'] == role, f'the {role} chain opens with a {role} preamble')
    sid, key = bytes.fromhex(preamble['sid']), bytes.fromhex(preamble['key'])
    to_child = hkdf_sha256(key, sid, b'custody.v1 frame mac supervisor->child')
    to_supervisor = hkdf_sha256(key, sid, b'custody.v1 frame mac child->supervisor')

    def opened(line, mac_key, sender):
        raw = line.encode('utf-8')
        covered, mac = raw[:-74], raw[-66:-2]
        check(raw[-74:-66] == TRAILER and hmac.compare_digest(hmac.new(mac_key, covered, hashlib.sha256).hexdigest().encode(), mac), f'{role} chain: MAC of a {sender} frame')
        check(HEADER.match(covered) is not None, f'{role} chain: envelope layout')
        frame = json.loads(line, object_pairs_hook=no_duplicates)
        check(frame['sid'] == preamble['sid'] and frame['from'] == sender, f'{role} chain: session and sender')
        return frame

    hello = opened(chain['hello_line'], to_supervisor, role)
    body = hello['body']
    signed = jcs({'custody': 'custody.hello.v1', 'sid': preamble['sid'], 'challenge': preamble['challenge'],
                  'role': role, 'id': body['id'], 'key_epoch': body['key_epoch'], 'head': body['head']})
    check(signed.decode() == chain['hello_signed_message'], f'{role} chain: the signed hello text')
    check(body['role'] == role and body['id'] == preamble['name'], f'{role} chain: the hello id is the preamble name')
    check(ed25519_verify(bytes.fromhex(body['public_key']), signed, bytes.fromhex(body['signature'])), f'{role} chain: hello signature')
    ping = opened(chain['ping_line'], to_child, 'supervisor')
    pong = opened(chain['pong_line'], to_supervisor, role)
    check((hello['seq'], ping['seq'], pong['seq']) == (0, 0, 1) and pong['id'] == ping['id'] and pong['kind'] == 'result', f'{role} chain: sequence and answer')


def expect_poisoned(session, code):
    status, rest, records = session.finish()
    check(rest == b'', f'after {code} the child writes nothing more on stdout')
    check(status == 70, f'after {code} the child exits 70 (got {status})')
    poisoned = [r for r in records if r['event'] == 'channel_poisoned']
    check(any(r.get('code') == code for r in poisoned), f'the stderr log names {code} in a channel_poisoned line')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--node', required=True)
    parser.add_argument('--kernel', required=True)
    parser.add_argument('--executor')
    parser.add_argument('--vectors')
    options = parser.parse_args()
    home = tempfile.mkdtemp(prefix='custody-conformance-')
    os.chmod(home, 0o700)
    kernel_dir = os.path.join(home, 'kernel')
    argv = [options.node, options.kernel, '--dir', kernel_dir]
    passed = []
    try:
        self_check()
        passed.append('Ed25519 verification agrees with RFC 8032 test 1')
        if options.vectors:
            with open(options.vectors, encoding='utf-8') as file:
                chains = json.load(file)['chains']
            for role in ('kernel', 'executor'):
                replay_chain(role, chains[role])
                passed.append(f'the published {role} chain replays: preamble, hello, ping, pong')
        # 1. provision
        session = Session(argv, 'kernel', 'kernel', 'provision')
        pin = session.hello()
        check(pin['id'] == 'kernel' and pin['key_epoch'] == 1, 'the kernel proves id "kernel", epoch 1')
        with open(os.path.join(kernel_dir, 'kernel.pub'), 'rb') as pub:
            check(pub.read() == pin['public_key'].encode() + b'\n', 'kernel.pub holds the key the hello proved')
        passed.append('provision: hello verified, identity pinned, kernel.pub agrees')
        pong = session.request('ping', 'q1', {})
        check(pong['kind'] == 'result' and list(pong['body']) == ['now'] and isinstance(pong['body']['now'], int), 'ping is answered {now}')
        passed.append('provision: ping answered by a result {now}')
        session.send('launch', 'q2', {})
        expect_poisoned(session, 'unexpected_message')
        passed.append('provision: an unknown kind poisons (unexpected_message): silent stdout, exit 70, logged')

        # 2. serve, leave by shutdown
        session = Session(argv, 'kernel', 'kernel', 'serve')
        session.hello(pin)
        # grant.list pages by key (PROTOCOL.md, "Paging"): each page after the last one's next_after, newest first
        for n in range(3):
            added = session.request('grant.add', f'a{n}', {'tool': 'review-notes/*', 'subject': '*', 'max_invocations': 1 + n,
                                                           'max_cost_units': None, 'not_before': None, 'ttl_ms': 60000})
            check(added['kind'] == 'result', 'grant.add is answered with the grant')
        whole = session.request('grant.list', 'l0', {'live': False, 'limit': 10000, 'after': None})['body']
        check(whole['next_after'] is None and len(whole['grants']) >= 3, 'one page holds every grant, and says it is the last')
        paged, after, n = [], None, 0
        while True:
            n += 1
            page = session.request('grant.list', f'l{n}', {'live': False, 'limit': 1, 'after': after})['body']
            check(len(page['grants']) == 1, 'a page of limit 1 holds one grant')
            paged += [grant['capability_id'] for grant in page['grants']]
            if page['next_after'] is None:
                break
            check(set(page['next_after']) == {'issued_at', 'capability_id'} and page['next_after']['capability_id'] == paged[-1],
                  'next_after is the key of the page\'s last grant')
            after = page['next_after']
        check(paged == [grant['capability_id'] for grant in whole['grants']], 'the pages, in turn, are the whole listing')
        issued = [json.loads(grant['capability'])['body']['issued_at'] for grant in whole['grants']]
        check(issued == sorted(issued, reverse=True), 'grants are listed newest first')
        passed.append('serve: grant.list pages by next_after, newest first, the pages making the whole listing')
        # ops.list answers each operation as a *listed operation*: exactly the members PROTOCOL.md's table names, newest first
        for n in range(3):
            decided = session.request('reserve', f'r{n}', {'request_id': f'listed-{n}', 'subject': 'agent', 'tool': 'review-notes/append',
                                                           'arguments': {'n': n}, 'capability_id': None, 'cost_units': 0})
            check(decided['kind'] == 'result', 'reserve is answered with a decision')
        whole = session.request('ops.list', 'o0', {'states': None, 'limit': 10000, 'after': None})['body']
        members = {'operation_id', 'request_id', 'subject', 'tool', 'state', 'capability_id', 'executor_id', 'created_at', 'updated_at', 'flag'}
        check(whole['next_after'] is None and {op['request_id'] for op in whole['operations']} == {'listed-0', 'listed-1', 'listed-2'},
              'one page lists the three operations, and says it is the last')
        check(all(set(op) == members for op in whole['operations']), 'each listed operation has exactly the members of a listed operation')
        keys = [(-op['created_at'], op['operation_id']) for op in whole['operations']]
        check(keys == sorted(keys), 'operations are listed newest first, operation_id breaking ties')
        paged, after, n = [], None, 0
        while True:
            n += 1
            page = session.request('ops.list', f'o{n}', {'states': None, 'limit': 1, 'after': after})['body']
            paged += page['operations']
            if page['next_after'] is None:
                break
            check(page['next_after'] == {'created_at': paged[-1]['created_at'], 'operation_id': paged[-1]['operation_id']},
                  'next_after is the key of the page\'s last operation')
            after = page['next_after']
        check(paged == whole['operations'], 'the pages, in turn, are the whole listing')
        passed.append('serve: ops.list lists operations as listed operations, newest first, paged by next_after')

        answer = session.request('shutdown', 's1', {})
        check(answer['kind'] == 'result' and answer['body'] == {}, 'shutdown is answered {}')
        status, rest, _ = session.finish()
        check(status == 0 and rest == b'', f'after shutdown the child exits 0 (got {status})')
        passed.append('serve: the hello proves the pin; shutdown answers {} and exits 0')

        # 3. serve under the least frame bound: an answer too large, then an envelope out of order (its MAC is right)
        session = Session(argv, 'kernel', 'kernel', 'serve', max_frame_bytes=1024)
        session.hello(pin)
        added = session.request('grant.add', 'g1', {'tool': 'review-notes/*', 'subject': '*', 'max_invocations': 1,
                                                    'max_cost_units': None, 'not_before': None, 'ttl_ms': 60000})
        check(added['kind'] == 'result' and added['body']['capability_id'], 'grant.add is answered with the grant')
        # A reserve's answer carries its signed receipt: well over 1024 bytes.
        too_large = session.request('reserve', 'g2', {'request_id': 'too-large-1', 'subject': 'agent', 'tool': 'review-notes/append',
                                                       'arguments': {}, 'capability_id': None, 'cost_units': 0})
        check(too_large['kind'] == 'error' and too_large['body']['code'] == 'frame_too_large', 'a result over the bound is answered error frame_too_large')
        check(session.request('ping', 'q0', {})['kind'] == 'result', 'the channel stays open after frame_too_large')
        passed.append('serve under 1024 bytes: a result too large is answered error frame_too_large; the channel stays open')
        covered = session.seal('ping', 'q1', {})
        reordered = covered.replace(b'{"v":1,"sid":"' + session.sid.hex().encode() + b'"', b'{"sid":"' + session.sid.hex().encode() + b'","v":1', 1)
        check(reordered != covered, 'the reordered envelope differs')
        session.send_covered(reordered)
        expect_poisoned(session, 'frame_malformed')
        passed.append('serve: a reordered envelope poisons (frame_malformed): silent stdout, exit 70, logged')

        # 4. provisioning an existing directory is refused with a fatal frame
        session = Session(argv, 'kernel', 'kernel', 'provision')
        fatal = session.receive()
        check(fatal is not None and fatal['kind'] == 'fatal' and fatal['id'] == 'fatal' and fatal['seq'] == 0, 'a refused setup sends one fatal frame as frame 0')
        check(list(fatal['body']) == ['code', 'message'] and fatal['body']['code'] == 'store_exists', 'the fatal frame names store_exists')
        status, rest, records = session.finish()
        check(status == 78 and rest == b'', f'after a fatal frame the child exits 78 (got {status})')
        check(any(r['event'] == 'setup_refused' and r.get('code') == 'store_exists' for r in records), 'the refusal is logged as setup_refused')
        passed.append('provision again: one fatal frame (store_exists), exit 78, logged')

        # 5. an executor pinning that kernel
        if options.executor:
            executor_argv = [options.node, options.executor, '--dir', os.path.join(home, 'executors', 'default'),
                             '--resources', os.path.join(home, 'resources')]
            pins = {'kernel': pin['public_key']}
            session = Session(executor_argv, 'executor', 'default', 'provision', pins=pins)
            executor_pin = session.hello()
            check(executor_pin['id'] == 'default' and executor_pin['key_epoch'] == 1, 'the executor proves its preamble name as id, epoch 1')
            with open(os.path.join(home, 'executors', 'default', 'executor.pub'), 'rb') as pub:
                check(pub.read() == executor_pin['public_key'].encode() + b'\n', 'executor.pub holds the key the hello proved')
            pong = session.request('ping', 'p1', {})
            check(pong['kind'] == 'result' and isinstance(pong['body'].get('now'), int), 'the executor answers ping')
            status, rest, _ = session.finish()
            check(status == 0 and rest == b'', f'an executor whose stdin ends exits 0 (got {status})')
            session = Session(executor_argv, 'executor', 'default', 'serve', pins=pins)
            session.hello(executor_pin)
            status, _, _ = session.finish()
            check(status == 0, f'the served executor leaves with exit 0 (got {status})')
            passed.append('executor: provisioned pinning the kernel, id = its name, ping, stdin end exits 0, served under its pin')
    except Failure as failure:
        for line in passed:
            print(f'ok   {line}')
        print(f'FAIL {failure}')
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for line in passed:
        print(f'ok   {line}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
