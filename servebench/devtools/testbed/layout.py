"""Everything a testbed's name decides, computed without touching the machine.

A testbed is named (`sbtb` by default, `$SERVEBENCH_TESTBED` or `--name`); from the name come
its namespaces (`<name>-sw` for the switch, `<name>-h1`... for the hosts), the one interface it
adds to the machine (`<name>-tb`), its state directory, the /24 of 198.18.0.0/15 it lives in
(a slot picked from a hash of the name, the next free one when another testbed holds it), and
the Slurm ports (from the slot). Two testbeds with different names share nothing.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_NAME = "sbtb"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]{0,9}$")  # 10 characters: `<name>-tb` stays within IFNAMSIZ (15)
MAX_HOSTS = 64
BENCHMARK_RANGE = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544: never routed on the internet
SLOTS = BENCHMARK_RANGE.num_addresses // 256  # one /24 per testbed: 512
MACHINE_HOST_ID = 254  # the machine's own address on a testbed's bridge: <subnet>.254
STATE_PREFIX = "servebench-testbed-"
SLURM_PORT_BASE = 17000  # slurmctld at SLURM_PORT_BASE + 2 * slot, slurmd one above


def default_name() -> str:
    return os.environ.get("SERVEBENCH_TESTBED") or DEFAULT_NAME


def state_root() -> Path:
    """Where state directories live: $SERVEBENCH_TESTBED_ROOT, else /var/tmp. Not under /tmp,
    /run or /root: each host mounts its own over those, and every host must see the state."""
    return Path(os.environ.get("SERVEBENCH_TESTBED_ROOT") or "/var/tmp")


PER_HOST_DIRS = ("/dev/shm", "/tmp", "/run", "/root")  # each host mounts its own over these


def hidden_on_hosts(path: Path) -> bool:
    """Whether the hosts cannot see path (it lies under a directory each host has its own of)."""
    text = str(path.resolve())
    return any(text == d or text.startswith(d + "/") for d in PER_HOST_DIRS)


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise ValueError(f"testbed name {name!r}: give 1-10 characters, a lowercase letter then lowercase "
                         "letters or digits (it goes into interface names, at most 15 characters)")
    return name


def preferred_slot(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % SLOTS


def choose_slot(name: str, taken: set[int]) -> int:
    """The name's own slot, else the next free one (another testbed, or an address the machine
    already has in the range, holds it)."""
    start = preferred_slot(name)
    for step in range(SLOTS):
        slot = (start + step) % SLOTS
        if slot not in taken:
            return slot
    raise ValueError(f"no free /24 left in {BENCHMARK_RANGE}: {SLOTS} testbeds are up")


def slot_subnet(slot: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network((int(BENCHMARK_RANGE.network_address) + 256 * slot, 24))


def slot_of(address: str) -> int | None:
    """The slot an address of the benchmarking range falls in (None outside the range)."""
    ip = ipaddress.IPv4Address(address)
    if ip not in BENCHMARK_RANGE:
        return None
    return (int(ip) - int(BENCHMARK_RANGE.network_address)) // 256


@dataclass(frozen=True)
class Host:
    name: str  # its hostname and Slurm node name: h1, h2, ...
    index: int
    address: str
    netns: str  # `ip netns` name, <testbed>-h<index>


@dataclass(frozen=True)
class Layout:
    """One testbed: names, addresses, ports and paths. Built by `make_layout`, saved in the
    state directory's testbed.json (with the PIDs of its daemons) and read back from it."""

    name: str
    slot: int
    cpus: int  # CPUs each host declares to Slurm
    state_dir: Path
    hosts: tuple[Host, ...] = field(default_factory=tuple)
    shared: tuple[str, ...] = ()  # the machine's directories every host sees read-only at the same path (`--share`)

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return slot_subnet(self.slot)

    @property
    def machine_address(self) -> str:
        """The machine's own address on the testbed's bridge (its root network namespace)."""
        return str(self.subnet.network_address + MACHINE_HOST_ID)

    @property
    def switch_netns(self) -> str:
        return f"{self.name}-sw"

    @property
    def machine_link(self) -> str:
        """The machine's end of the veth into the switch: the only interface the testbed adds
        to the machine's own namespace."""
        return f"{self.name}-tb"

    @property
    def netns_names(self) -> list[str]:
        return [self.switch_netns] + [h.netns for h in self.hosts]

    @property
    def run_dir(self) -> Path:
        """The same path on the machine and on every host (each host has its own /run): the
        munge socket lives here, so one slurm.conf serves the machine's clients and the hosts."""
        return Path("/run") / f"{STATE_PREFIX}{self.name}"

    @property
    def munge_socket(self) -> Path:
        return self.run_dir / "munge.socket"

    @property
    def slurmctld_port(self) -> int:
        return SLURM_PORT_BASE + 2 * self.slot

    @property
    def slurmd_port(self) -> int:
        return self.slurmctld_port + 1

    @property
    def partition(self) -> str:
        return "testbed"

    # paths under the state directory
    @property
    def state_file(self) -> Path:
        return self.state_dir / "testbed.json"

    @property
    def ns_dir(self) -> Path:
        """Holds the files the hosts' mount, UTS and IPC namespaces are bound to (a private mount)."""
        return self.state_dir / "ns"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def ssh_dir(self) -> Path:
        return self.state_dir / "ssh"

    @property
    def ssh_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "config"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def munge_dir(self) -> Path:
        return self.state_dir / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def slurm_dir(self) -> Path:
        """slurm.conf's directory; each host sees it as its /etc/slurm."""
        return self.state_dir / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_dir / "slurm.conf"

    @property
    def slurm_state_dir(self) -> Path:
        return self.state_dir / "slurmctld"

    @property
    def hosts_file(self) -> Path:
        """Each host's /etc/hosts: the hosts by name."""
        return self.state_dir / "etc-hosts"

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"testbed {self.name} has no host {name!r} (hosts: {', '.join(h.name for h in self.hosts)})")

    def host_dir(self, host: Host) -> Path:
        return self.state_dir / "hosts" / host.name

    def home_dir(self, host: Host) -> Path:
        """The host's /root: its own ~/.ssh and ~/.cache/servebench (the servebench cache dir)."""
        return self.host_dir(host) / "root"

    def ns_file(self, host: Host, kind: str) -> Path:
        return self.ns_dir / f"{host.name}.{kind}"

    def netns_file(self, host: Host) -> Path:
        return Path("/run/netns") / host.netns

    def spool_dir(self, host: Host) -> Path:
        return self.host_dir(host) / "slurmd"

    def host_key(self, host: Host) -> Path:
        return self.host_dir(host) / "ssh_host_ed25519_key"

    def sshd_config(self, host: Host) -> Path:
        return self.host_dir(host) / "sshd_config"

    def to_json(self) -> dict:
        return {"name": self.name, "slot": self.slot, "cpus": self.cpus, "state_dir": str(self.state_dir),
                "subnet": str(self.subnet), "machine_address": self.machine_address,
                "hosts": [{"name": h.name, "index": h.index, "address": h.address, "netns": h.netns}
                          for h in self.hosts], "shared": list(self.shared)}

    @classmethod
    def from_json(cls, data: dict) -> "Layout":
        return cls(name=data["name"], slot=data["slot"], cpus=data["cpus"], state_dir=Path(data["state_dir"]),
                   hosts=tuple(Host(**h) for h in data["hosts"]), shared=tuple(data.get("shared", ())))


def state_dir_for(name: str, root: Path | None = None) -> Path:
    return (root or state_root()) / f"{STATE_PREFIX}{check_name(name)}"


def make_layout(name: str, hosts: int, cpus: int, slot: int, root: Path | None = None,
                shared: tuple[str, ...] = ()) -> Layout:
    check_name(name)
    for path in shared:
        if not Path(path).is_absolute() or not Path(path).is_dir():
            raise ValueError(f"--share {path}: give an existing directory by its absolute path")
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"--hosts {hosts}: give 1 to {MAX_HOSTS}")
    if cpus < 1:
        raise ValueError(f"--cpus {cpus}: give at least 1")
    subnet = slot_subnet(slot)
    return Layout(name=name, slot=slot, cpus=cpus, state_dir=state_dir_for(name, root),
                  shared=tuple(str(Path(path).resolve()) for path in shared),
                  hosts=tuple(Host(name=f"h{i}", index=i, address=str(subnet.network_address + i),
                                   netns=f"{name}-h{i}") for i in range(1, hosts + 1)))
