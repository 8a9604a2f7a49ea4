"""Hold the machine's CPU wake-up latency at zero while a benchmark runs (`--all-cpus-poll`).

On a KVM guest an idle vCPU halts (HLT exits to the host; here `cpuidle` is haltpoll with
`guest_halt_poll_ns` 0, so it never polls first) and waking it again for a timer or a packet
costs tens to hundreds of microseconds: a load generator idle between arrivals pays that on
the send after a gap and on the first token after a long prefill. Writing 0 to
/dev/cpu_dma_latency and keeping the file open (the kernel's CPU latency QoS request, what
`cyclictest` and tuned's latency-performance profile do) makes every idle CPU poll instead
of halting, until the file is closed. Machine-wide; needs root. Nothing is changed for
good: the request ends with the process.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

DEVICE = Path("/dev/cpu_dma_latency")


def idle_states(cpu: int = 0) -> str:
    """The cpuidle driver and the CPU's states with their usage counts, for the printed context."""
    base = Path("/sys/devices/system/cpu")
    try:
        driver = (base / "cpuidle" / "current_driver").read_text().strip()
        states = sorted((base / f"cpu{cpu}" / "cpuidle").glob("state*"))
        listed = ", ".join(f"{(s / 'name').read_text().strip()} (used {(s / 'usage').read_text().strip()})"
                           for s in states)
        return f"cpuidle {driver}: {listed}"
    except OSError:
        return "cpuidle: not readable"


@contextlib.contextmanager
def zero_wakeup_latency(enabled: bool = True) -> Iterator[str]:
    """While inside, idle CPUs poll; yields what was done (or why not)."""
    if not enabled:
        yield "idle CPUs halt (the machine's default)"
        return
    try:
        fd = os.open(DEVICE, os.O_WRONLY)
    except OSError as exc:
        yield f"idle CPUs halt: {DEVICE} not writable ({exc.strerror})"
        return
    try:
        os.write(fd, struct.pack("i", 0))
        yield f"idle CPUs poll ({DEVICE} held at 0 us)"
    finally:
        os.close(fd)
