"""One hop of a relay, on the nodes: `receive` on the target, `send` on the source (standard library
only: it runs with the node's python3, sent as `python3 -c <this file> prepare|receive|send <json>`, since
nothing of servebench is installed on a node).

The tree goes as a tar stream over one TCP connection from the source's copy (verified by digest
when it arrived) straight to the target: no byte crosses the orchestrator's link. The receiver
listens on the target's address only, takes the one connection that opens with the hop's token
(a stray connection is closed unread), unpacks into a scratch directory beside the target path
and renames it into place only once tar succeeded, as a copy from the orchestrator does; then it
answers `ok`. The token only keeps strays out: what proves the tree is its digest, which the
orchestrator computes on the target after the hop.

Exit codes say which end failed, so the relay blames the right node: SOURCE_FAILED when the source
could not read its own tree, anything else nonzero is the target's (or the link's) failure.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

CHUNK = 1 << 20
SOURCE_FAILED = 3
TARGET_FAILED = 4


def prepare(target: str, tag: str) -> str:
    """The empty scratch directory beside `target`, made before the hop starts: a target that
    cannot have it fails here, at once, and no sender waits for a receiver that never listens."""
    part = f"{target}.part-{tag}"
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    return part


def receive(address: str, port: int, token: str, target: str, tag: str, accept_s: float, idle_s: float) -> None:
    """Take the tree for `target` from the first connection that shows the token (within accept_s)."""
    part = prepare(target, tag)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((address, port))
        server.listen(8)
        conn = accept_with_token(server, token, time.monotonic() + accept_s)
    with conn:
        conn.settimeout(idle_s)
        unpack = subprocess.Popen(["tar", "-C", part, "-xf", "-"], stdin=subprocess.PIPE)
        assert unpack.stdin is not None  # started with stdin=PIPE
        try:
            while chunk := conn.recv(CHUNK):
                unpack.stdin.write(chunk)
        finally:
            unpack.stdin.close()
        if unpack.wait() != 0:
            shutil.rmtree(part, ignore_errors=True)
            fail(TARGET_FAILED, f"tar on the target exit {unpack.returncode}")
        if os.path.lexists(target):
            shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.unlink(target)
        os.rename(part, target)
        conn.sendall(b"ok\n")


def accept_with_token(server: socket.socket, token: str, deadline: float) -> socket.socket:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            fail(TARGET_FAILED, "no sender came")
        server.settimeout(left)
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        conn.settimeout(5.0)
        expected = (token + "\n").encode()
        if read_exactly(conn, len(expected)) == expected:
            return conn
        conn.close()


def read_exactly(conn: socket.socket, size: int) -> bytes:
    """The first `size` bytes of the stream (fewer: the peer closed or stalled); the tree's bytes after them stay."""
    got = b""
    try:
        while len(got) < size:
            chunk = conn.recv(size - len(got))
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    return got


def send(address: str, port: int, token: str, source: str, connect_s: float, idle_s: float) -> None:
    """Stream the tree at `source` to the receiver at address:port; wait for its `ok`."""
    if not os.path.isdir(source):
        fail(SOURCE_FAILED, f"{source} is not a directory on the source")
    conn = connect(address, port, time.monotonic() + connect_s)
    with conn:
        conn.settimeout(idle_s)
        conn.sendall((token + "\n").encode())
        pack = subprocess.Popen(["tar", "-C", source, "-cf", "-", "."], stdout=subprocess.PIPE)
        assert pack.stdout is not None  # started with stdout=PIPE
        try:
            while chunk := pack.stdout.read(CHUNK):
                conn.sendall(chunk)
        except OSError as exc:
            pack.kill()
            pack.wait()
            fail(TARGET_FAILED, f"sending to {address}:{port}: {exc}")
        if pack.wait() != 0:
            fail(SOURCE_FAILED, f"tar on the source exit {pack.returncode}")
        conn.shutdown(socket.SHUT_WR)
        answer = conn.recv(16)
    if answer != b"ok\n":
        fail(TARGET_FAILED, f"the target did not confirm the tree (answered {answer!r})")


def connect(address: str, port: int, deadline: float) -> socket.socket:
    """The receiver starts at the same moment as this sender: retried until it listens or the deadline."""
    while True:
        try:
            return socket.create_connection((address, port), timeout=5.0)
        except OSError as exc:
            if time.monotonic() >= deadline:
                fail(TARGET_FAILED, f"no receiver at {address}:{port}: {exc}")
            time.sleep(0.1)


def fail(code: int, message: str) -> None:
    print(f"relay hop: {message}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str]) -> None:
    action, arguments = argv[0], json.loads(argv[1])
    try:
        if action == "prepare":
            prepare(**arguments)
        elif action == "receive":
            receive(**arguments)
        else:
            send(**arguments)
    except OSError as exc:  # the target's path, its socket or the link between the two
        fail(TARGET_FAILED, str(exc))


if __name__ == "__main__":
    main(sys.argv[1:])
