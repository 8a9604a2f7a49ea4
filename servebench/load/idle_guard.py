"""Hold CPUs polling when idle for as long as the process that started this one lives.

Run by path (standard library only, no servebench import), with the PM QoS files of the CPUs:
    python idle_guard.py /sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us ...
Writes "n/a" to each (the kernel reads it as "no wake-up latency tolerated": the idle governor
polls instead of halting the CPU), prints "polling", then reads stdin until end of file and
writes every old value back. The end of file comes when the starter closes the pipe, exits or
is killed (even by SIGKILL), so the machine's idle setting is always restored.
"""

import signal
import sys


def main(paths: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: restore on end of file instead
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    held: list[tuple[str, str]] = []
    try:
        for path in paths:
            with open(path) as f:
                old = f.read().strip()
            with open(path, "w") as f:
                f.write("n/a")
            held.append((path, old))
    except OSError as exc:
        print(f"cannot hold {exc.filename}: {exc.strerror}", flush=True)
    else:
        print("polling", flush=True)
        sys.stdin.read()
    for path, old in held:
        with open(path, "w") as f:
            f.write(old)  # "0" reads back and writes as "no constraint"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
