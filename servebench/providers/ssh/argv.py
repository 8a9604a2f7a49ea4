"""The ssh provider's command lines and remote scripts, built without touching anything (pure).

Every remote command is a string the node's login shell parses, so every piece of it is
quoted here with `shlex`; scripts that need more than one command run under `sh -c` so they
do not depend on the user's login shell. Kept apart from the side effects so it is unit-tested
without a host.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from servebench.providers.remote import (  # noqa: F401 (re-exported for the provider's modules)
    BOOTSTRAP,
    RUN_ID_CHARS,
    STATUS_SCRIPT,
    WRAPPER,
    RemoteFiles,
    check_run_id,
    env_argv,
    parse_started,
    parse_status,
    pinned_argv,
    remote_files,
    remote_run_dir,
    start_script,
)
from servebench.providers.ssh.spec import SshJumpSpec, SshProviderSpec

CONTROL_PERSIST_S = 300  # an idle master outlives a crashed orchestrator by this much, no more
SERVER_ALIVE_S = 15


def jump_alias(host_name: str) -> str:
    return f"{host_name}--jump"


def ssh_config_text(spec: SshProviderSpec, control_dir: Path, known_hosts: Path) -> str:
    """The run's own ssh_config: one block per host (and jump host), then settings for all.

    ssh takes the first value it reads for each option, so the hosts' own fields come first,
    the run's settings next and a user's `ssh_config` (if any) last: it can add, not override.
    """
    lines = [f"# servebench ssh provider: ssh -F {control_dir / 'config'} <host>"]
    for host in spec.hosts:
        lines += _host_block(host.name, host.address, host.user, host.port, host.key)
        if host.jump:
            lines.append(f"  ProxyJump {jump_alias(host.name)}")
            lines += _jump_block(host.name, host.jump)
    strict = "yes" if spec.host_keys == "check" else "accept-new"
    lines += [
        "Host *",
        "  BatchMode yes",
        f"  StrictHostKeyChecking {strict}",
        f"  UserKnownHostsFile {known_hosts}",
        "  ControlMaster auto",
        f"  ControlPath {control_dir}/%C",
        f"  ControlPersist {CONTROL_PERSIST_S}",
        f"  ConnectTimeout {spec.connect_timeout_s}",
        f"  ServerAliveInterval {SERVER_ALIVE_S}",
        "  ServerAliveCountMax 3",
        "  ClearAllForwardings yes",
        "  ForwardAgent no",
        "  RequestTTY no",
        "  LogLevel ERROR",
    ]
    if spec.ssh_config:
        lines.append(f"  Include {spec.ssh_config.expanduser().resolve()}")
    return "\n".join(lines) + "\n"


HOST_KEY_CHANGED = re.compile(r"key sent by the remote host is\s+(SHA256:\S+)")
HOST_KEY_UNKNOWN = re.compile(r"No (\S+) host key is known for (\S+) and you have requested strict checking")
HOST_KEY_TYPE = re.compile(r"The fingerprint for the (\S+) key")


def host_key_problem(stderr: str, known_hosts: Path) -> str | None:
    """ssh's words on a host key it refused, in one line that says what to do (None: not a host key's)."""
    if "Host key verification failed" not in stderr:
        return None
    changed = HOST_KEY_CHANGED.search(stderr)
    if changed:
        kind = HOST_KEY_TYPE.search(stderr)
        return (f"its host key changed: it sent {kind.group(1) + ' ' if kind else ''}{changed.group(1)}, not the key "
                f"{known_hosts} holds for it (another machine at that address, or the host reinstalled): check the "
                f"fingerprint with the host's administrator, then `ssh-keygen -f {known_hosts} -R <host>`")
    unknown = HOST_KEY_UNKNOWN.search(stderr)
    if unknown:
        return (f"no {unknown.group(1)} host key is known for {unknown.group(2)} in {known_hosts}: add it after "
                "checking its fingerprint (`ssh-keyscan`, or one interactive `ssh`), or set the provider's "
                "`host_keys: accept-new` to trust a new host on first use")
    return f"host key verification failed against {known_hosts}: {stderr.strip().splitlines()[-1]}"


def _host_block(alias: str, address: str, user: str, port: int, key: Path | None) -> list[str]:
    block = [f"Host {alias}", f"  HostName {address}", f"  User {user}", f"  Port {port}"]
    if key:
        block += [f"  IdentityFile {key.expanduser().resolve()}", "  IdentitiesOnly yes"]
    return block


def _jump_block(host_name: str, jump: SshJumpSpec) -> list[str]:
    """The jump connection is not multiplexed itself: it lives inside the host's master."""
    return _host_block(jump_alias(host_name), jump.address, jump.user, jump.port, jump.key) + [
        "  ControlMaster no", "  ControlPath none"]


def ssh_argv(config: Path, host: str, remote: str | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """`ssh -F <run config> [options] -- <host> [remote command string]`."""
    return ["ssh", "-F", str(config), *options, "--", host] + ([remote] if remote is not None else [])


def control_argv(config: Path, host: str, operation: str) -> list[str]:
    """Ask a host's master connection: `check` (is it up?) or `exit` (close it)."""
    return ["ssh", "-F", str(config), "-O", operation, "--", host]


def sh_command(script: str, *args: str) -> str:
    """A remote command string that runs script under sh with args, whatever the login shell."""
    return shlex.join(["sh", "-c", script, "sh", *args])


def known_host_name(address: str, port: int) -> str:
    """How known_hosts names a host: its address, or `[address]:port` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def host_key_argv(known_hosts: Path, address: str, port: int) -> list[str]:
    """`ssh-keygen -l -F <host> -f <known_hosts>`: the fingerprints known_hosts holds for the host (hashed
    entries too), read after the host's connection was checked against them."""
    return ["ssh-keygen", "-l", "-F", known_host_name(address, port), "-f", str(known_hosts)]


def host_key_fingerprints(output: str) -> str | None:
    """`ssh-keygen -l -F`'s lines (`<host> ED25519 SHA256:<hash>`, after a `# Host ... found` line) as
    `ED25519 SHA256:<hash>`, one per key, joined by commas (None: known_hosts holds no key for the host)."""
    found = []
    for line in output.splitlines():
        words = line.split()
        if line.startswith("#") or len(words) < 3 or not words[2].startswith("SHA256:"):
            continue
        found.append(f"{words[1]} {words[2]}")
    return ", ".join(sorted(set(found))) or None
