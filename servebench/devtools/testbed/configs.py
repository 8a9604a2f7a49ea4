"""The files and command lines of a testbed, as text and argv lists: no side effects here.

Every daemon runs in the foreground (`-D`, `--foreground`), so the PID of the process started
is the daemon's own PID, the one recorded and the one `down` stops.
"""

from __future__ import annotations

import copy
import re
import shlex
import sys
from pathlib import Path

from servebench.devtools.testbed.layout import STATE_PREFIX, Host, Layout, hidden_on_hosts

DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MOUNT_KINDS = ("mnt", "uts", "ipc")  # the per-host namespaces bound to files (the network one is `ip netns`)

SSHD, MUNGED, SLURMCTLD, SLURMD = "/usr/sbin/sshd", "/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"

# binary -> the Debian package that ships it (the daemons where Debian puts them: sshd must be
# started by its absolute path)
REQUIRED_BINARIES = {
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    SSHD: "openssh-server",
    MUNGED: "munge",
    SLURMCTLD: "slurmctld (slurm-wlm)",
    SLURMD: "slurmd (slurm-wlm)",
    "sinfo": "slurm-client (slurm-wlm)",
}


def slurm_conf(layout: Layout) -> str:
    """One controller on the first host, slurmd on every host; no cgroup plugin, no accounting.
    `config_overrides`: each node is what this file says (CPUs), not what slurmd detects."""
    first = layout.hosts[0]
    lines = [
        f"# servebench testbed {layout.name}: written by `servebench testbed up`, removed by `down`",
        f"ClusterName={layout.name}",
        f"SlurmctldHost={first.name}({first.address})",
        f"SlurmctldPort={layout.slurmctld_port}",
        f"SlurmdPort={layout.slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        f"StateSaveLocation={layout.slurm_state_dir}",
        f"SlurmdSpoolDir={layout.state_dir}/hosts/%n/slurmd",
        f"SlurmctldPidFile={layout.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={layout.run_dir}/slurmd.pid",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "ReturnToService=2",
        "MailProg=/bin/true",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=30",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "MessageTimeout=10",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "",
    ]
    lines += [f"NodeName={h.name} NodeAddr={h.address} NodeHostname={h.name} CPUs={layout.cpus} State=UNKNOWN"
              for h in layout.hosts]
    lines.append(f"PartitionName={layout.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def sshd_config(layout: Layout, host: Host) -> str:
    """Root logs in by key only (the testbed's key, in the host's own /root/.ssh)."""
    return "\n".join([
        f"# servebench testbed {layout.name}, host {host.name}",
        f"ListenAddress {host.address}:22",
        f"HostKey {layout.host_key(host)}",
        "PidFile /run/sshd.pid",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "AuthorizedKeysFile .ssh/authorized_keys",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "MaxSessions 64",
        "MaxStartups 64:30:128",
        "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
        "",
    ])


def ssh_client_config(layout: Layout) -> str:
    """For `ssh -F <state>/ssh/config h1 ...`: names, key, known host keys, multiplexing."""
    lines = [f"# servebench testbed {layout.name}: ssh -F {layout.ssh_config} h1"]
    for host in layout.hosts:
        lines += [f"Host {host.name} {host.address}", f"  HostName {host.address}"]
    patterns = " ".join([h.name for h in layout.hosts] + [h.address for h in layout.hosts])
    lines += [
        f"Host {patterns}",
        "  User root",
        f"  IdentityFile {layout.ssh_key}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {layout.known_hosts}",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ControlMaster auto",
        f"  ControlPath {layout.ssh_dir}/%C",
        "  ControlPersist 60",
        "  LogLevel ERROR",
        "",
    ]
    return "\n".join(lines)


def known_hosts(layout: Layout, public_keys: dict[str, str]) -> str:
    """public_keys: host name -> the `ssh-ed25519 AAAA...` line of its host key."""
    return "".join(f"{h.name},{h.address} {' '.join(public_keys[h.name].split()[:2])}\n" for h in layout.hosts)


def hosts_file(layout: Layout) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{h.address}\t{h.name}" for h in layout.hosts]
    lines.append(f"{layout.machine_address}\tmachine")
    return "\n".join(lines) + "\n"


def hidden_software() -> list[str]:
    """The machine's Python installation when it lies where hosts have their own directory (a
    pyenv under /root): venvs made from it (the project's, the engine's) name it as their base
    interpreter. Shown read-only on every host, as a cluster shares its software tree."""
    prefix = Path(sys.base_prefix).resolve()
    return [str(prefix)] if hidden_on_hosts(prefix) and str(prefix).startswith("/root/") else []


def software_binds(home: Path, shared: tuple[str, ...] = ()) -> list[str]:
    """Bind each hidden software prefix, and each directory the testbed shares (`--share`: a
    cluster's NFS home or parallel file system, read-only here), into the host's future /root
    before that is mounted (the machine's /root is covered afterwards); `--rbind` of the home then
    carries the binds along. A shared directory outside /root is bound over itself, read-only."""
    q = shlex.quote
    lines = []
    for path in shared:
        if not path.startswith("/root/"):
            lines += [f"mount --bind {q(path)} {q(path)}", f"mount -o remount,bind,ro {q(path)}"]
    for prefix in [*hidden_software(), *(path for path in shared if path.startswith("/root/"))]:
        target = home / Path(prefix).relative_to("/root")
        lines += [f"mkdir -p {q(str(target))}", f"mount --bind {q(prefix)} {q(str(target))}",
                  f"mount -o remount,bind,ro {q(str(target))}"]
    return lines


def host_setup_script(layout: Layout, host: Host) -> str:
    """Run once inside the host's new mount namespace (private propagation), in its network
    namespace: drop the namespace files inherited from the machine (so this host never pins
    another testbed's namespaces), then its own /dev/shm, /tmp, /run and /root, the testbed's
    /etc/hosts and /etc/slurm, its hostname."""
    q = shlex.quote
    ns_dirs = "^" + re.escape(str(layout.state_dir.parent)) + "/" + STATE_PREFIX + "[a-z0-9]+/ns$"
    return "\n".join([
        "set -e",
        # the namespace directories of every testbed (this one's included) and /run/netns first: a
        # lazy unmount takes the nsfs mounts below each with it, in one call (one call per earlier
        # host's namespace file would make a testbed's set-up grow with the square of its hosts);
        # then any nsfs mount point left (the field after ' - ' is the type; the 5th is the mount point)
        f"awk -v p={q(ns_dirs)} '$5 ~ p {{print $5}}' /proc/self/mountinfo "
        "| while read -r m; do umount -l \"$m\" 2>/dev/null || true; done",
        "umount -l /run/netns 2>/dev/null || true",
        "awk '{for (i = 7; i <= NF; i++) if ($i == \"-\") { if ($(i + 1) == \"nsfs\") print $5; break }}' "
        "/proc/self/mountinfo | while read -r m; do umount -l \"$m\" 2>/dev/null || true; done",
        *software_binds(layout.home_dir(host), layout.shared),
        "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
        "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
        "mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run",
        f"mkdir -p -m 755 /run/sshd {q(str(layout.run_dir))}",
        f"mount --rbind {q(str(layout.home_dir(host)))} /root",
        f"mount --bind {q(str(layout.hosts_file))} /etc/hosts",
        f"if [ -d /etc/slurm ]; then mount --bind {q(str(layout.slurm_dir))} /etc/slurm; fi",
        f"hostname {q(host.name)}",
        "ip link set lo up",
        f"ip addr add {host.address}/{layout.subnet.prefixlen} dev eth0",
        "ip link set eth0 up",
        "",
    ])


def enter_argv(layout: Layout, host: Host, workdir: str | None = "/") -> list[str]:
    """The prefix that runs a command on a host: its network, mount, UTS and IPC namespaces."""
    argv = ["nsenter", f"--net={layout.netns_file(host)}"]
    argv += [f"--{'mount' if kind == 'mnt' else kind}={layout.ns_file(host, kind)}" for kind in MOUNT_KINDS]
    if workdir:
        argv.append(f"--wd={workdir}")
    return argv + ["--"]


def create_host_argv(layout: Layout, host: Host) -> list[str]:
    """Makes the host's mount, UTS and IPC namespaces, bound to files so they outlive the command."""
    return (["nsenter", f"--net={layout.netns_file(host)}", "--", "unshare"]
            + [f"--{'mount' if kind == 'mnt' else kind}={layout.ns_file(host, kind)}" for kind in MOUNT_KINDS]
            + ["--propagation", "private", "--", "sh", "-c", host_setup_script(layout, host)])


def munged_argv(layout: Layout, label: str, origin: str) -> list[str]:
    """label: a host name, or `machine` for the daemon the machine's own Slurm clients use."""
    return [MUNGED, "--foreground", f"--key-file={layout.munge_key}", f"--socket={layout.munge_socket}",
            f"--pid-file={layout.run_dir}/munged.pid", "--log-file=/dev/null",
            f"--seed-file={layout.munge_dir}/{label}.seed", f"--origin={origin}"]


def sshd_argv(layout: Layout, host: Host) -> list[str]:
    return [SSHD, "-D", "-e", "-f", str(layout.sshd_config(host))]


def slurmctld_argv(layout: Layout) -> list[str]:
    return [SLURMCTLD, "-D", "-c", "-f", str(layout.slurm_conf)]  # -c: a fresh cluster, no state to read


def slurmd_argv(layout: Layout, host: Host) -> list[str]:
    return [SLURMD, "-D", "-N", host.name, "-f", str(layout.slurm_conf)]


def daemon_env() -> dict[str, str]:
    """Daemons start from a clean environment: nothing of the caller's (a SLURM_JOB_ID of an
    enclosing allocation, a venv) leaks into the testbed."""
    return {"PATH": DAEMON_PATH, "HOME": "/root", "LANG": "C.UTF-8"}


def slurm_client_env(layout: Layout) -> dict[str, str]:
    """What the machine's own `sinfo`/`srun`/`salloc` need to talk to the testbed's Slurm."""
    return {"SLURM_CONF": str(layout.slurm_conf)}


def ssh_argv(layout: Layout, host: Host, command: list[str] | None = None) -> list[str]:
    """ssh to a host with the testbed's client config (key, known hosts, multiplexing)."""
    return ["ssh", "-F", str(layout.ssh_config), host.name] + ([shlex.join(command)] if command else [])


def point_campaign(data: dict, layout: Layout) -> dict:
    """A campaign's data (the shipped testbed campaigns name the default testbed's addresses and
    paths) pointed at this testbed: ssh hosts' addresses, key and known hosts, the Slurm
    controller's config and partition, and the testbed a network axis acts on."""
    data = copy.deepcopy(data)
    provider = data["provider"]
    if provider["kind"] == "ssh":
        by_name = {host.name: host for host in layout.hosts}
        for host in provider["hosts"]:
            host["address"], host["key"] = by_name[host["name"]].address, str(layout.ssh_key)
        provider["known_hosts"] = str(layout.known_hosts)
    elif provider["kind"] == "slurm":
        provider["slurm_conf"], provider["partition"] = str(layout.slurm_conf), layout.partition
    if data.get("network"):
        data["network"]["testbed"] = layout.name
    return data
