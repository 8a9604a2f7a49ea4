"""A delay line: copies Ethernet frames between two interfaces, each frame held a set time.

    python -m servebench.devtools.testbed.delay_line --a h2 --b h2d --delay-ms 5 --max-delay-ms 1000

The testbed's link knob (`servebench/devtools/testbed/links.py`, docs/testbed.md "Link latency and
bandwidth") runs one of these in a testbed's switch namespace, between a host's port (`--a`,
the veth whose peer is the host's eth0) and the end of a veth pair whose other end sits on the
bridge (`--b`): this kernel has no `netem`, so frames are held in user space instead. Standard
library only; it can also be run by its path. So it imports nothing of servebench: the delay
cap is the link setting's (`servebench.config.campaign.MAX_LINK_DELAY_MS`), given by the caller
as `--max-delay-ms` (links.py always does), and checked here as well.

How it holds a frame: every frame read from one side is stamped with the time the kernel
received it (SO_TIMESTAMPNS, so a late read does not add to the delay) and written to the
other side once that time plus the delay has come. The delay is the same for every frame of a
direction, so a FIFO per direction keeps the due times in order (no reordering, as on a wire).
The wait is `select` with a microsecond timeout and a 1 us timer slack; the process asks for
real-time scheduling (SCHED_FIFO, --rt-priority, default 10; 0: normal scheduling), so a busy
machine does not make it late: on a 2-core machine running a vLLM benchmark, the p99 RTT of
pings through a 5 ms line (10 ms added) was 12.2-13.0 ms with normal scheduling, 10.4-10.5 ms
with it. Linux keeps 5% of each CPU for normal processes whatever a real-time process does
(kernel.sched_rt_runtime_us). A frame never leaves before its due time.

Offloads are kept, not turned off: both sockets use PACKET_VNET_HDR, so a frame the kernel
hands over as one TCP segmentation (GSO) super-frame, or with its checksum still to fill in,
is read with its virtio-net header and written back with it; the kernel segments it (or fills
the checksum) where it would have without the delay line. A super-frame is up to 64 KiB of
frames that left their sender at the same instant, so holding it whole holds each of them for
exactly the delay. No host interface is reconfigured and no `ethtool` is needed.

Bounded: at most --max-queue-mb bytes wait per direction (beyond that a frame is dropped, as
a full switch buffer would, and counted); a write the kernel refuses (a full rate limiter
queue behind it: ENOBUFS, EAGAIN) drops that frame and counts it. Stoppable: SIGTERM or SIGINT
ends it within one wait (at most 0.2 s), it closes its sockets and prints its counters; an
interface that disappears ends it with exit code 1. It prints `ready` once both sockets are
bound, then nothing until it ends. With --stats FILE it writes its counters there as JSON
(at most once a second while frames pass, and at the end): frames, bytes, drops, and how late
frames left (the time between a frame's due time and its write; a late frame was held longer
than the delay by that much).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4  # sll_pkttype of a frame this host sent (never forwarded back)
SO_TIMESTAMPNS = 35  # = SCM_TIMESTAMPNS: struct timespec (two 64-bit fields on 64-bit Linux)
PR_SET_TIMERSLACK = 29
VNET_HDR_LEN = 10  # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
FRAME_BUFFER = 256 * 1024  # a GSO super-frame is at most 64 KiB by default (more with BIG TCP)
SOCKET_BUFFER = 16 * 1024 * 1024  # SO_RCVBUFFORCE / SO_SNDBUFFORCE (root)
MAX_WAIT_S = 0.2  # the longest select: how soon a SIGTERM is noticed when no frame is due
DRAIN_PER_WAKE = 512  # frames read from one socket per wake-up, so the other side is never starved
LATE_S = 0.0005  # frames that left more than this after their due time are counted as late
STATS_EVERY_S = 1.0


class Stop(Exception):
    """Raised by the SIGTERM/SIGINT handler: leave the loop, close, report."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m servebench.devtools.testbed.delay_line",
                                     description="copy frames between two interfaces, each held --delay-ms")
    parser.add_argument("--a", required=True, help="one interface (the host's port on the switch)")
    parser.add_argument("--b", required=True, help="the other interface (the veth end towards the bridge)")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay added to every frame, each way")
    parser.add_argument("--max-delay-ms", type=float, required=True,
                        help="the largest --delay-ms accepted (the link setting's cap: MAX_LINK_DELAY_MS)")
    parser.add_argument("--max-queue-mb", type=float, default=64.0,
                        help="bytes held per direction at most; a frame beyond is dropped (default 64)")
    parser.add_argument("--rt-priority", type=int, default=10,
                        help="SCHED_FIFO priority (default 10); 0: normal scheduling")
    parser.add_argument("--stats", help="write the counters to this file as JSON (each second, and at the end)")
    args = parser.parse_args(argv)
    if not 0 <= args.delay_ms <= args.max_delay_ms:
        parser.error(f"--delay-ms {args.delay_ms}: give 0 to {args.max_delay_ms:g}")
    if not 0 <= args.rt_priority <= 99:
        parser.error("--rt-priority: give 0 (normal scheduling) to 99")
    if args.max_queue_mb <= 0:
        parser.error("--max-queue-mb: give a positive number")
    if args.a == args.b:
        parser.error("--a and --b must differ")
    return args


def open_port(ifname: str) -> socket.socket:
    """A raw socket on one interface: every frame it receives (not those sent from it), with the
    kernel's receive time and the virtio-net header; non-blocking."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)  # Linux 4.20+; pkttype is checked as well
        except OSError:
            pass
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        for option, fallback in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):  # SO_RCVBUFFORCE, SO_SNDBUFFORCE
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, fallback, SOCKET_BUFFER)
        sock.bind((ifname, ETH_P_ALL))
        index = socket.if_nametoindex(ifname)
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", index, PACKET_MR_PROMISC, 0, b""))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def kernel_time(ancdata) -> float | None:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec + nsec / 1e9
    return None


def set_realtime(priority: int) -> str:
    """SCHED_FIFO at this priority (0: leave the scheduling as it is); says what it got."""
    if priority <= 0:
        return "normal scheduling"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return f"SCHED_FIFO {priority}"
    except (OSError, AttributeError) as exc:
        return f"normal scheduling (SCHED_FIFO refused: {exc})"


def set_timer_slack(nanoseconds: int) -> None:
    """A select timeout may end up to the timer slack late (50 us by default): make it 1 us."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(nanoseconds), 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Direction:
    """Frames read from `source`, waiting to be written to `sink`."""

    def __init__(self, name: str, source: socket.socket, sink: socket.socket, max_bytes: int):
        self.name, self.source, self.sink, self.max_bytes = name, source, sink, max_bytes
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued_bytes = 0
        self.frames = self.bytes = self.dropped_full = self.dropped_send = self.truncated = 0
        self.max_late_s = 0.0  # the latest a frame left after its due time
        self.sum_late_s = 0.0
        self.late = 0  # frames written more than LATE_S after their due time

    def read(self, buffer: bytearray, view: memoryview, delay_s: float) -> None:
        """Read what waits on the source (at most DRAIN_PER_WAKE frames), each stamped due."""
        anc = socket.CMSG_SPACE(16)
        for _ in range(DRAIN_PER_WAKE):
            try:
                size, ancdata, flags, address = self.source.recvmsg_into([buffer], anc)
            except (BlockingIOError, InterruptedError):
                return
            if address[2] == PACKET_OUTGOING:
                continue
            if flags & socket.MSG_TRUNC or size <= VNET_HDR_LEN:
                self.truncated += 1
                continue
            received = kernel_time(ancdata)
            age = max(0.0, time.time() - received) if received is not None else 0.0
            due = time.monotonic() - age + delay_s
            if self.queued_bytes + size > self.max_bytes:
                self.dropped_full += 1
                continue
            self.queue.append((due, bytes(view[:size])))
            self.queued_bytes += size

    def write_due(self, now: float) -> None:
        queue = self.queue
        while queue and queue[0][0] <= now:
            due, frame = queue.popleft()
            self.queued_bytes -= len(frame)
            late = now - due
            self.max_late_s = max(self.max_late_s, late)
            self.sum_late_s += late
            self.late += late > LATE_S
            try:
                self.sink.send(frame)
            except (BlockingIOError, InterruptedError):
                self.dropped_send += 1
                continue
            except OSError as exc:
                if exc.errno in (errno.ENOBUFS, errno.EMSGSIZE, errno.EINVAL):
                    self.dropped_send += 1
                    continue
                raise
            self.frames += 1
            self.bytes += len(frame) - VNET_HDR_LEN

    def counters(self) -> dict:
        sent = self.frames + self.dropped_send
        return {"frames": self.frames, "bytes": self.bytes, "dropped_queue_full": self.dropped_full,
                "dropped_refused": self.dropped_send, "truncated": self.truncated,
                "late_frames": self.late, "late_over_ms": LATE_S * 1e3,
                "mean_late_ms": round(self.sum_late_s / sent * 1e3, 4) if sent else 0.0,
                "max_late_ms": round(self.max_late_s * 1e3, 4)}

    def summary(self) -> str:
        c = self.counters()
        return (f"{self.name}: {c['frames']} frames {c['bytes']} bytes, dropped {c['dropped_queue_full']} (queue full) "
                f"{c['dropped_refused']} (refused) {c['truncated']} (truncated); {c['late_frames']} late by over "
                f"{c['late_over_ms']:g} ms, mean {c['mean_late_ms']:.3f} ms late, latest {c['max_late_ms']:.3f} ms")


def write_stats(path: str | None, args: argparse.Namespace, directions: list[Direction], scheduling: str,
                running: bool) -> None:
    if not path:
        return
    data = {"pid": os.getpid(), "a": args.a, "b": args.b, "delay_ms": args.delay_ms, "scheduling": scheduling,
            "running": running, "time": time.time(), "directions": {d.name: d.counters() for d in directions}}
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:  # the counters are a report: never a reason to stop forwarding
        pass


def run(args: argparse.Namespace) -> int:
    delay_s = args.delay_ms / 1e3
    max_bytes = int(args.max_queue_mb * 1024 * 1024)

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop: the counters are written once
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    set_timer_slack(1000)
    scheduling = set_realtime(args.rt_priority)
    a = b = None
    directions: list[Direction] = []
    try:
        a, b = open_port(args.a), open_port(args.b)
        directions = [Direction(f"{args.a}->{args.b}", a, b, max_bytes),
                      Direction(f"{args.b}->{args.a}", b, a, max_bytes)]
        by_socket = {d.source: d for d in directions}
        buffer = bytearray(FRAME_BUFFER)
        view = memoryview(buffer)
        write_stats(args.stats, args, directions, scheduling, True)
        print(f"ready: {args.a} <-> {args.b}, {args.delay_ms:g} ms each way, {scheduling}, pid {os.getpid()}",
              flush=True)
        sockets = [a, b]
        next_stats, written = time.monotonic() + STATS_EVERY_S, 0
        while True:
            now = time.monotonic()
            for direction in directions:
                direction.write_due(now)
            if now >= next_stats:
                total = sum(d.frames + d.dropped_full + d.dropped_send for d in directions)
                if total != written:
                    write_stats(args.stats, args, directions, scheduling, True)
                    written = total
                next_stats = now + STATS_EVERY_S
            heads = [d.queue[0][0] for d in directions if d.queue]
            wait = min([MAX_WAIT_S] + [max(0.0, due - now) for due in heads])
            readable, _, broken = select.select(sockets, [], sockets, wait)
            if broken:
                raise OSError(errno.ENODEV, "an interface went away")
            for sock in readable:
                by_socket[sock].read(buffer, view, delay_s)
    except Stop:
        write_stats(args.stats, args, directions, scheduling, False)
        print("stopped: " + "; ".join(d.summary() for d in directions), flush=True)
        return 0
    except OSError as exc:
        write_stats(args.stats, args, directions, scheduling, False)
        print(f"delay_line: {args.a} <-> {args.b}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for port in (a, b):
            if port is not None:
                port.close()


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
