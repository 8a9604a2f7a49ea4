"""A testbed of real hosts on this one machine (as root), for tests, CI and demos.

Each host is a network namespace with its own address in 198.18.0.0/15 (no route out of the
testbed) plus its own mount, UTS and IPC namespaces: its own /dev/shm, /tmp, /run and /root
(so its own servebench cache dir), its hostname (h1, h2, ...), a real sshd on its address
and a real Slurm cluster across the hosts (slurmctld on h1, munged and slurmd on each).
See docs/testbed.md.

- `layout`: names, addresses, ports and paths, from the testbed's name (pure);
- `configs`: slurm.conf, sshd_config, the host set-up script, the daemons' argv (pure);
- `machine`: up, down, status on the local machine (the side effects).
"""

from __future__ import annotations

from servebench.devtools.testbed.configs import enter_argv, point_campaign, slurm_client_env, ssh_argv
from servebench.devtools.testbed.layout import DEFAULT_NAME, Host, Layout, default_name
from servebench.devtools.testbed.machine import TestbedError, down, known_testbeds, load, slurm_client, status, up

__all__ = [
    "DEFAULT_NAME", "Host", "Layout", "TestbedError", "default_name", "down", "enter_argv", "known_testbeds",
    "load", "point_campaign", "slurm_client", "slurm_client_env", "ssh_argv", "status", "up",
]
