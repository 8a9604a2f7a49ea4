"""What one of an engine's server processes holds before any model: measured on the node, for the build.

An engine whose server processes are Python (`Engine.runtime_modules`) is probed once its build is placed: the
build's python imports the modules a served process imports and reports, from /proc/self/smaps_rollup, its
anonymous memory (the interpreter's objects and heaps: every server process holds its own) and the rest of what
it maps (file-backed pages: the libraries' code and data, which the server's processes on a node map from the
same files and hold once). Its Pss, or its private pages, would depend on what else maps those files at the
time (alone, Pss equals Rss), so neither is taken. Kept per (hostname, build key), so a
campaign pays for it on a host and build once (seconds: the import); read by `servebench plan` for the memory
check, where the engine's own figure is the fallback the plan names when the node and build were never probed.
Emulated nodes are not probed: qemu's own memory would be counted with the process's.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import Campaign
from servebench.engines.base import Engine, EngineSpecBase
from servebench.offline import no_network
from servebench.paths import cache_dir, keep_json
from servebench.providers import Node, Provider
from servebench.providers.fanout import hosts_at_once, outcomes

FOLDER = "runtime"
TIMEOUT_S = 300.0   # the import of a served process's modules: 15 s on a busy 2-core host
VERSION = 2         # of the program and what it reports: a change measures again

PROGRAM = r"""
import importlib, json, os, re, shutil, sys, tempfile, time
# what the imports write for themselves (torch's compile caches) goes in a folder of its own, removed after:
# the probe leaves nothing on the node
scratch = tempfile.mkdtemp(prefix="sb-runtime-")
os.environ["TMPDIR"] = tempfile.tempdir = scratch
started = time.monotonic()
try:
    for name in sys.argv[1].split(","):
        importlib.import_module(name)
finally:
    shutil.rmtree(scratch, ignore_errors=True)
text = open("/proc/self/smaps_rollup").read()
kib = {key: int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1))
       for key in ("Rss", "Pss", "Anonymous")}
print(json.dumps({"private_bytes": kib["Anonymous"] * 1024, "shared_bytes": (kib["Rss"] - kib["Anonymous"]) * 1024,
                  "pss_bytes": kib["Pss"] * 1024, "rss_bytes": kib["Rss"] * 1024,
                  "import_s": round(time.monotonic() - started, 2)}))
"""


def cache_key(hostname: str, build_key: str, modules: Sequence[str]) -> str:
    """A host's measurement of a build (its CPU and its interpreter follow from the two)."""
    identity = {"hostname": hostname, "build_key": build_key, "modules": list(modules), "version": VERSION}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def cached(cache: Path, key: str) -> dict | None:
    try:
        found = json.loads((cache / FOLDER / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get("private_bytes"), int) else None


def keep(cache: Path, key: str, measured: dict) -> None:
    keep_json(cache / FOLDER / f"{key}.json", measured)


def parse(stdout: str) -> dict:
    """The program's last line; a ValueError naming what it printed instead."""
    lines = stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict) or not isinstance(found.get("private_bytes"), int):
        raise ValueError(f"the probe printed no figures: {stdout.strip()[-200:]!r}")
    return found


def measure_node(provider: Provider, node: Node, inventory: dict, build: EngineBuild,
                 modules: Sequence[str]) -> dict:
    """The node's figures (`private_bytes`, `shared_bytes`, `pss_bytes`, `rss_bytes`, `import_s`, `hostname`,
    `build_key`, `measured_at`, `cached`), from the cache when this host and build were probed before."""
    hostname = str(inventory.get("hostname") or node.address)
    key = cache_key(hostname, build.key, modules)
    kept = cached(cache_dir(), key)
    if kept is not None:
        return {**kept, "cached": True}
    done = provider.run(node, [build.python, "-c", PROGRAM, ",".join(modules)], timeout=TIMEOUT_S)
    if done.returncode != 0:
        last = (done.stderr or "").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"exit {done.returncode}: {last[0][-300:]}")
    measured = parse(done.stdout) | {"hostname": hostname, "build_key": build.key, "measured_at": round(time.time())}
    keep(cache_dir(), key, measured)
    return {**measured, "cached": False}


def measure_nodes(provider: Provider, nodes: list[Node], inventories: dict[str, dict], build: EngineBuild,
                  modules: Sequence[str], log: Callable[[str], None] = print) -> dict[str, dict]:
    """{node name: figures} for each node the build runs on natively: one probe a host (its nodes share the
    figure), the hosts `hosts_at_once` at a time; a host that could not be probed is said and its nodes left out
    (the plan's fallback stands for them)."""
    if not modules or not build.python_version:
        return {}
    by_host: dict[str, list[Node]] = {}
    for node in nodes:
        if node.emulate is None:
            by_host.setdefault(str(inventories.get(node.name, {}).get("hostname") or node.address), []).append(node)
    probed = outcomes(list(by_host.values()), lambda members: measure_node(
        provider, members[0], inventories.get(members[0].name, {}), build, modules), hosts_at_once(provider))
    found: dict[str, dict] = {}
    for outcome in probed:
        first = outcome.item[0].name
        if outcome.result is None:  # a figure for the next plan, never a reason to stop the run
            log(f"node {first}: a server process's runtime not measured: {str(outcome.error).splitlines()[0]}")
            continue
        figures = outcome.result
        found.update({member.name: figures for member in outcome.item})
        how = "cached" if figures["cached"] else f"measured in {figures['import_s']} s"
        log(f"node {first}: a server process's runtime {figures['private_bytes'] / 2 ** 20:.0f} MiB of its own "
            f"and {figures['shared_bytes'] / 2 ** 20:.0f} MiB its processes share (with {', '.join(modules)} "
            f"imported; {how})")
    return found


def cached_runtime(hostnames: Sequence[str], build_key: str, modules: Sequence[str]) -> dict | None:
    """What a node was measured at, under the first of the names it may have that was probed with this build."""
    for hostname in hostnames:
        found = cached(cache_dir(), cache_key(hostname, build_key, modules))
        if found is not None:
            return found
    return None


def node_hostnames(campaign: Campaign, name: str) -> list[str]:
    """The names a node's measurement may be kept under: this host's name for a node on this host, the
    node's name and its address (the hostname a remote node reported is not known before it is reached)."""
    names = [socket.gethostname()] if campaign.provider.nodes_on_this_host else []
    for spec in campaign.provider.node_specs():
        if spec.name == name:
            address = getattr(spec, "address", None)
            names += [name] + ([str(address)] if address else [])
    return list(dict.fromkeys(names or [name]))


_KEYS: dict[tuple[str, str], str] = {}


def build_key(engine: Engine, spec: EngineSpecBase) -> str | None:
    """The spec's build key, known without the network (None: a source not fetched yet, or a build this host
    cannot describe; the fallback figures then stand). Kept for the process: a plan asks once a mode."""
    from servebench.builds.builders import inputs_and_key

    cache_key_ = (engine.kind, spec.model_dump_json())
    if cache_key_ not in _KEYS:
        try:
            with no_network():
                _KEYS[cache_key_] = inputs_and_key(engine.build_recipe(spec), cache_dir(), log=lambda _: None)[1]
        except Exception:
            return None   # asked again next time: the source may have been fetched meanwhile
    return _KEYS[cache_key_]


def measured_runtimes(campaign: Campaign, engine: Engine, spec: EngineSpecBase, names: list[str]) -> dict[str, dict]:
    """{node name: what a run measured there for the spec's build}, for the nodes probed before."""
    if not engine.runtime_modules or not engine.starts_servers:
        return {}
    key = build_key(engine, spec)
    if key is None:
        return {}
    found = {name: cached_runtime(node_hostnames(campaign, name), key, engine.runtime_modules) for name in names}
    return {name: figures for name, figures in found.items() if figures is not None}
