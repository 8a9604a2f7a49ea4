"""The campaign's `provider:` block for hosts reached over SSH (docs/ssh-provider.md).

```yaml
provider:
  kind: ssh
  hosts:
    - {name: h1, address: 198.18.0.1, cpus: "0-3", key: ~/.ssh/id_ed25519}
    - {name: h2, address: 10.0.0.7, user: bench, port: 2222, cpus: [0, 1],
       jump: {address: gateway.example.org, user: bench}}
```
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from servebench.config.campaign import NodeSpec, ProviderSpecBase, StrictModel

ADDRESS_PATTERN = r"^[A-Za-z0-9_.:%-]+$"  # a host name or an IPv4/IPv6 address: nothing ssh could read as an option
USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


class SshJumpSpec(StrictModel):
    """A bastion the host is reached through (ssh's ProxyJump)."""

    address: str = Field(pattern=ADDRESS_PATTERN, description="The jump host's name or IP address.")
    user: str = Field("root", pattern=USER_PATTERN, description="The user ssh logs in as on the jump host.")
    port: int = Field(22, ge=1, le=65535, description="The jump host's SSH port.")
    key: Path | None = Field(None, description="Private key for the jump host (default: ssh's own identities).")


class SshHostSpec(NodeSpec):
    """One node: a host reached over SSH, and the CPUs servebench may use there."""

    address: str = Field(pattern=ADDRESS_PATTERN, description="Where ssh connects and the node's servers listen.")
    user: str = Field("root", pattern=USER_PATTERN, description="The user ssh logs in as; the run's processes "
                      "on the host run as this user.")
    port: int = Field(22, ge=1, le=65535, description="The host's SSH port.")
    key: Path | None = Field(None, description="Private key (default: ssh's own identities and agent).")
    jump: SshJumpSpec | None = Field(None, description="A jump host (bastion) the host is reached through "
                                     "(ssh's ProxyJump); null: ssh connects directly.")


class SshProviderSpec(ProviderSpecBase):
    kind: Literal["ssh"] = "ssh"
    nodes_field: ClassVar[str] = "hosts"
    nodes_on_this_host: ClassVar[bool] = False  # the load generator's CPUs are the orchestrator's, not a node's
    hosts: list[SshHostSpec] = Field(min_length=1, description="The nodes: each a host reached over SSH, with the "
                                     "CPUs servebench may use there.")
    ssh_config: Path | None = Field(None, description="An ssh_config file read after the provider's own "
                                    "settings (which win), e.g. for ciphers or a ProxyCommand.")
    known_hosts: Path | None = Field(None, description="The known host keys a host's key is checked against "
                                     "(default: the user's own ~/.ssh/known_hosts; with `host_keys: accept-new` "
                                     "and none given, a file of the run's own).")
    host_keys: Literal["check", "accept-new"] = Field("check", description=(
        "`check`: a host whose key is not in `known_hosts`, or differs from it, is refused before anything "
        "runs (ssh's StrictHostKeyChecking yes). `accept-new`: a host never seen is trusted on first use and "
        "its key added (hosts made anew for each run, like the testbed's); a changed key is still refused."))
    connect_timeout_s: int = Field(10, ge=1, le=300, description="Seconds ssh waits for a connection to a host "
                                   "(or jump host) to be set up (ssh's ConnectTimeout).")
    remote_dir: str = Field("/tmp", pattern=r"^/[A-Za-z0-9_./-]*$",
                            description="Where each run's directory (logs, exit codes) is made on every host.")
    shared_paths: list[str] = Field(default_factory=list, description=(
        "Directories that are the same file system on this host and on every node (an NFS home, a "
        "parallel file system): an engine build or model under one is used in place, never copied."))
    python: str = Field("python3", pattern=r"^[A-Za-z0-9_./-]+$",
                        description="The Python 3 on the hosts (runs inventory, ports, /dev/shm and process tools).")
    interpreter: Literal["placed", "node"] = Field("placed", description=(
        "Where the engine build's Python comes from on a host that does not have it (an aarch64 build made "
        "on this x86 host links a CPython servebench unpacked here): `placed`, the build's own, copied by "
        "digest beside the venv; `node`, the host's own python3.X of the build's minor version, refused "
        "before serving when the host has none (docs/arm-partition.md)."))
    lease_s: int = Field(60, ge=5, le=3600, description=(
        "Seconds a host keeps the run's processes without hearing from the orchestrator (it renews "
        "a lease there every lease_s/5 s); then the host stops them itself: an orchestrator killed "
        "or cut off from the host leaves nothing behind."))

    def node_specs(self) -> list[NodeSpec]:
        return [NodeSpec(name=host.name, cpus=host.cpus, emulate=host.emulate, memory_gib=host.memory_gib)
                for host in self.hosts]

    @property
    def total_cpus(self) -> int:
        return sum(len(host.cpus) for host in self.hosts)
