"""A tree on every node of the allocation by Slurm's own broadcast (`sbcast`).

sbcast sends one file to the nodes of a job through the slurmd daemons, each forwarding to
others (a tree of `--fanout`, by default the cluster's TreeWidth), so the orchestrator's link
carries the file once whatever the node count. A tree is a directory, so it goes as one tar file
(packed here once, beside the run's srun logs), then each node unpacks it into a scratch
directory beside the target path that replaces the target only once complete, as a copy does,
and the tree's digest is computed on the node. A node whose unpack or digest fails is named
with why; the others keep their tree. The tar file is removed from every node afterwards.
"""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from servebench.providers.base import Node, Provider

UNPACK_SCRIPT = """\
set -e
archive=$1; target=$2; part="$2.part-$3"
trap 'rm -f "$archive"' EXIT
[ -f "$archive" ] || { echo "no $archive: sbcast did not deliver it here" >&2; exit 3; }
rm -rf "$part"; mkdir -p "$part"
tar -C "$part" -xf "$archive"
rm -rf "$target"; mv "$part" "$target"
"""
NODES_AT_ONCE = 8  # unpacks and digests in flight (each a step on its node)
SBCAST_TIMEOUT_S = 1800.0


@dataclass
class Broadcast:
    """node -> seconds from the start until its tree verified; node -> why it holds none."""

    arrived: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    sbcast_s: float = 0.0


def sbcast_argv(job_id: int, archive: Path, destination: str, fanout: int | None = None) -> list[str]:
    """`sbcast -j J -f [-F N] FILE DEST`: -f replaces a file of that name left there."""
    return ["sbcast", "-j", str(job_id), "-f", *([f"--fanout={fanout}"] if fanout else []), str(archive), destination]


def pack(local: Path, archive: Path) -> None:
    result = subprocess.run(["tar", "-C", str(local), "-cf", str(archive), "."], capture_output=True, text=True,
                            timeout=SBCAST_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"packing {local} for sbcast: tar exit {result.returncode}: {result.stderr.strip()[-800:]}")


@dataclass(frozen=True)
class BroadcastSite:
    """Where a broadcast runs: the job, the orchestrator's scratch directory for the tar file, the nodes'
    directory the file lands in, and how a Slurm client command runs with the run's environment."""

    job_id: int
    scratch: Path
    remote_dir: str
    run_client: Callable[..., subprocess.CompletedProcess]


def broadcast_tree(provider: Provider, site: BroadcastSite, nodes: list[Node], local: Path, remote: str,
                   digest: str, fanout: int | None = None) -> Broadcast:
    """The tree at `local` at `remote` on each of `nodes` (all of the job's nodes get the file, the others
    have it removed), verified by `digest`."""
    tag = provider.run_id
    archive = site.scratch / f"broadcast-{digest[:16]}.tar"
    destination = f"{site.remote_dir.rstrip('/')}/servebench-{tag}-{digest[:16]}.tar"
    started = time.monotonic()
    outcome = Broadcast()
    try:
        pack(local, archive)
        sent = site.run_client(sbcast_argv(site.job_id, archive, destination, fanout), timeout=SBCAST_TIMEOUT_S)
        outcome.sbcast_s = time.monotonic() - started
        problem = None if sent.returncode == 0 else f"sbcast exit {sent.returncode}: {sent.stderr.strip()[-600:]}"

        def unpack(node: Node) -> tuple[str, str | None]:
            try:
                done = provider.run(node, ["sh", "-c", UNPACK_SCRIPT, "sh", destination, remote, tag], timeout=None)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                return node.name, f"{type(exc).__name__}: {str(exc).strip()[-600:]}"
            if done.returncode != 0:
                return node.name, (done.stderr or "").strip()[-600:] + (f" ({problem})" if problem else "")
            found = provider.tree_digest(node, remote)
            return node.name, None if found == digest else (f"the tree at {remote} does not verify (sha256 {found} "
                                                            f"there, {digest} here)")
        with ThreadPoolExecutor(max_workers=min(NODES_AT_ONCE, len(nodes) or 1)) as pool:
            for name, why in pool.map(unpack, nodes):
                if why is None:
                    outcome.arrived[name] = round(time.monotonic() - started, 2)
                else:
                    outcome.failed[name] = why
        others = [n for n in provider.nodes() if n.name not in {m.name for m in nodes}]
        with ThreadPoolExecutor(max_workers=min(NODES_AT_ONCE, len(others) or 1)) as pool:  # the job's other nodes
            list(pool.map(lambda node: provider.run(node, ["rm", "-f", destination]), others))
    finally:
        archive.unlink(missing_ok=True)
    return outcome
