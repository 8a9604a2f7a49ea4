"""The campaign's `provider:` block for nodes allocated by a Slurm controller (docs/slurm-provider.md).

```yaml
provider:
  kind: slurm
  nodes: 2
  cpus_per_node: 4
  partition: testbed
  time_limit: "00:30:00"
  # optional:
  account: myproject
  qos: normal                       # salloc --qos
  constraint: "sapphirerapids"      # salloc --constraint: node features, Slurm's expression ('a&b', 'a|b')
  nodelist: [h1, h2]                # exactly these nodes (names known to `plan` before allocating)
  slurm_conf: /etc/slurm/slurm.conf # the controller's config for the Slurm clients (SLURM_CONF)
  client_env: {SLURM_CLUSTERS: c1}  # more environment for salloc/srun/scontrol/scancel
```
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from servebench.config.campaign import (
    ENV_NAME_PATTERN,
    NodeSpec,
    ProviderSpecBase,
    parse_numa_layout,
    stringify_env,
)

SLURM_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"  # partitions, accounts, node names: nothing read as an option
# Slurm's feature expressions: names joined by & (and), | (or), with [..], (..), *N counts; no leading '-'
CONSTRAINT_PATTERN = r"^[A-Za-z0-9_(\[][A-Za-z0-9_.&|*:,()\[\]-]*$"
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (and "infinite"/"unlimited", refused: an
# allocation must end by itself if the orchestrator dies).
# What a step takes from the login node's environment by default (srun --export=NAMES: these and
# SLURM_*): who and where the user is, never PATH, LD_LIBRARY_PATH, MODULEPATH or the loaded modules
# of an x86 login node, which would be wrong on an ARM partition; a node's own setup builds those.
DEFAULT_EXPORT = ("HOME", "USER", "LOGNAME", "LANG", "TZ")

TIME_LIMIT_PATTERN = r"^(\d+-\d{1,2}(:\d{1,2}(:\d{1,2})?)?|\d+(:\d{1,2}(:\d{1,2})?)?)$"


class SlurmProviderSpec(ProviderSpecBase):
    kind: Literal["slurm"] = "slurm"
    nodes_field: ClassVar[str] = "nodes"        # a count here: problems about node i point at it
    nodes_on_this_host: ClassVar[bool] = False  # the load generator's CPUs are the orchestrator's, not a node's
    placement_ways: ClassVar[tuple[str, ...]] = ("copies", "relay", "sbcast")
    # qos, constraint and numa unset, and export at its default, dump as before they existed (the spec hash stays)
    omitted_at_default: ClassVar[tuple[str, ...]] = ProviderSpecBase.omitted_at_default + (
        "qos", "constraint", "numa", "export")
    nodes: int = Field(ge=1, description="How many nodes to allocate (salloc --nodes).")
    cpus_per_node: int = Field(ge=1, description="CPUs allocated on each node (one task per node with this "
                               "many CPUs); the node's CPU ids are the first this many a step there may use.")
    partition: str | None = Field(None, pattern=SLURM_NAME_PATTERN, description="Default: the cluster's.")
    time_limit: str = Field(description="The allocation's wall-clock limit "
                            "(salloc --time), e.g. '30' (minutes), '01:30:00', '1-00:00:00'.")
    account: str | None = Field(None, pattern=SLURM_NAME_PATTERN, description="The account the allocation is "
                                "charged to (salloc --account); default: your default account.")
    qos: str | None = Field(None, pattern=SLURM_NAME_PATTERN, description="The quality of service the job runs "
                            "under (salloc --qos); default: the one your account or the partition gives.")
    constraint: str | None = Field(None, pattern=CONSTRAINT_PATTERN, description="Node features every node "
                                   "must have (salloc --constraint), in Slurm's syntax: 'sapphirerapids', "
                                   "'intel&avx512', 'grace|neoverse_v2'; the features a site defines are "
                                   "in `sinfo -o '%N %f'`.")
    nodelist: list[str] | None = Field(None, description="Allocate exactly these nodes (salloc --nodelist); "
                                       "their names are then known before allocating.")
    exclusive: bool = Field(False, description="Allocate whole nodes (salloc --exclusive).")
    salloc_args: list[str] = Field(default_factory=list, description="More salloc options, "
                                   "--name=value form, e.g. ['--reservation=bench'].")
    slurm_conf: Path | None = Field(None, description="slurm.conf of the controller, for the Slurm clients "
                                    "(SLURM_CONF); default: the client's own.")
    client_env: dict[str, str] = Field(default_factory=dict, description="Environment added to every Slurm "
                                       "client command (salloc, srun, scontrol, squeue, scancel).")
    export: Literal["all", "none"] | list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(
        list(DEFAULT_EXPORT), description=(
            "What a step's task takes from the login node's environment (srun --export): `all`, everything "
            "(Slurm's own default: an x86 login node's PATH, LD_LIBRARY_PATH and loaded modules reach every "
            "node); `none`, only SLURM_*; a list of names, those and SLURM_*. Default: "
            "HOME, USER, LOGNAME, LANG, TZ. Unless PATH is exported, a step's PATH is "
            "/usr/local/bin:/usr/bin:/bin until `setup` extends it (module load)."))
    allocate_timeout_s: int = Field(300, ge=1, le=86400, description="Seconds to wait for the allocation "
                                    "(salloc --immediate); then it is given up and cancelled.")
    remote_dir: str = Field("/tmp", pattern=r"^/[A-Za-z0-9_./-]*$",
                            description="Where each run's directory (logs, PIDs, exit codes) is made on every node.")
    shared_paths: list[str] = Field(default_factory=list, description=(
        "Directories that are the same file system on this host and on every node (an NFS home, a "
        "parallel file system): an engine build or model under one is used in place, never copied."))
    python: str = Field("python3", pattern=r"^[A-Za-z0-9_./-]+$",
                        description="The Python 3 on the nodes (runs inventory, ports, /dev/shm and process tools).")
    interpreter: Literal["placed", "node"] = Field("placed", description=(
        "Where the engine build's Python comes from on a node that does not have it (an aarch64 build made "
        "on an x86 login node links a CPython servebench unpacked there): `placed`, the build's own, copied "
        "by digest beside the venv; `node`, the node's own python3.X of the build's minor version, refused "
        "before serving when the node has none (docs/arm-partition.md)."))
    numa: list[list[int]] | None = Field(None, description=(
        "The partition's NUMA layout, every node alike: each NUMA node a CPU list of the node's own CPU ids, "
        "'|' between them ('0-11|12-23|24-35|36-47' for A64FX). A node's layout is known only once it is "
        "allocated, so the plan binds by this one (docs/parallel-modes.md). Unset: the published layout of "
        "the target in `emulate`, else one group."))
    emulate: dict[str, str] = Field(default_factory=dict, description=(
        "Nodes that stand for another architecture (`{node1: graviton3}`, by the names of `nodelist` or "
        "node1, node2, ... in allocation order): every program the campaign starts there runs under "
        "qemu-user on that node (a testbed's stand-in for an ARM partition; docs/arm-partition.md)."))
    lease_s: int = Field(60, ge=5, le=3600, description=(
        "Seconds the allocation outlives silence from the orchestrator: a warden step on the first node "
        "hears a heartbeat every lease_s/5 s and cancels the job (scancel) when the orchestrator's end "
        "closes (it was killed) or nothing came for lease_s (hung, cut off): never a job left holding nodes."))

    @field_validator("numa", mode="before")
    @classmethod
    def _parse_numa(cls, value):
        return parse_numa_layout(value)

    @field_validator("client_env", mode="before")
    @classmethod
    def _env_strings(cls, value):
        return stringify_env(value)

    @field_validator("time_limit", mode="before")
    @classmethod
    def _minutes(cls, value):
        """A bare number is minutes (`time_limit: 30`). Quote times with colons: YAML reads an
        unquoted 1:30 as the base-60 number 90."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("time_limit")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        if not re.match(TIME_LIMIT_PATTERN, value):
            raise ValueError(f"{value!r} is not a Slurm time: give minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S "
                             "(not infinite: the allocation must end by itself if the orchestrator dies)")
        return value

    @field_validator("nodelist")
    @classmethod
    def _node_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        for name in value:
            if not re.match(SLURM_NAME_PATTERN, name):
                raise ValueError(f"node name {name!r}: letters, digits, '_', '.', '-' (not first)")
        if len(set(value)) != len(value):
            raise ValueError(f"node names repeat: {value}")
        return value

    @field_validator("salloc_args")
    @classmethod
    def _options_only(cls, value: list[str]) -> list[str]:
        for arg in value:
            if not arg.startswith("-"):
                raise ValueError(f"{arg!r}: give options in their --name=value form")
        return value

    @model_validator(mode="after")
    def _nodelist_matches(self) -> "SlurmProviderSpec":
        if self.nodelist is not None and len(self.nodelist) != self.nodes:
            raise ValueError(f"nodelist names {len(self.nodelist)} node(s) but nodes is {self.nodes}")
        return self

    def node_names(self) -> list[str]:
        """The nodelist, or placeholders `node1`... until an allocation names the real ones."""
        return list(self.nodelist) if self.nodelist else [f"node{i}" for i in range(1, self.nodes + 1)]

    @model_validator(mode="after")
    def _emulated_nodes_exist(self) -> "SlurmProviderSpec":
        if unknown := sorted(set(self.emulate) - set(self.node_names())):
            raise ValueError(f"emulate names {', '.join(unknown)}, not node(s) of the allocation "
                             f"({', '.join(self.node_names())})")
        return self

    def node_specs(self) -> list[NodeSpec]:
        return [NodeSpec(name=name, cpus=list(range(self.cpus_per_node)), emulate=self.emulate.get(name),
                         numa=self.numa) for name in self.node_names()]

    @property
    def total_cpus(self) -> int:
        return self.nodes * self.cpus_per_node
