"""`servebench builds list|gc`: the engine builds in the artifact cache (`<cache>/engines/`) and the
other trees of the cache (compile caches, sysroots, emulation roots, models, sources, tools), and
removing the ones no longer wanted (`servebench/builds/cache_trees.py`)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from servebench.builds.cache import MARKER
from servebench.builds.cache_trees import list_cache, plan_gc, remove_item
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg
from servebench.paths import cache_dir


def add_builds_parser(sub) -> None:
    builds = sub.add_parser("builds", help="the engine builds and other trees in the cache: list them, remove old ones")
    actions = builds.add_subparsers(dest="builds_action", required=True)
    listing = actions.add_parser("list", help="every tree: kind, key, what it is, size, last used")
    format_arg(listing, ("table", "json"))
    listing.set_defaults(func=cmd_builds_list)
    gc = actions.add_parser("gc", help="remove builds, their compile caches, sysroots and emulation roots "
                                       "(never one in use or needed by a kept build); say which")
    gc.add_argument("--key", action="append", default=[],
                    help="a key to remove, as `builds list` shows it: an engine build, a sysroot or an emulation "
                         "root (repeatable)")
    gc.add_argument("--older-than-days", type=float, help="trees neither built nor used for this many days")
    gc.add_argument("--incomplete", action="store_true", help="builds and trees that never finished")
    gc.add_argument("--keep", type=int, metavar="N", help="all but the newest N complete builds of each engine and "
                                                          "target CPU (sysroots: of each architecture; emulation "
                                                          "roots: of each profile and sysroot)")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    gc.set_defaults(func=cmd_builds_gc)


def cmd_builds_list(args: argparse.Namespace) -> int:
    items = list_cache(cache_dir())
    if args.format == "json":
        print(json.dumps([i.model_dump(mode="json", exclude={"entry"}) for i in items], indent=1))
        return EXIT_OK
    if not items:
        print(f"nothing in {cache_dir()}")
    for i in items:
        state = i.detail + (" (in use)" if i.in_use else "")
        print(f"{i.kind:<9} {i.key:<34} {state:<34} {_mib(i.size_bytes):>9}  {i.last_used:%Y-%m-%d %H:%M}  {i.path}")
    return EXIT_OK


def cmd_builds_gc(args: argparse.Namespace) -> int:
    cache = cache_dir()
    items = list_cache(cache)
    unknown = sorted(set(args.key) - {i.key for i in items})
    if unknown:
        print(f"servebench builds gc: no build or tree {', '.join(unknown)} in {cache}", file=sys.stderr)
        return EXIT_FAILED
    if not (args.key or args.older_than_days is not None or args.incomplete or args.keep is not None):
        print("servebench builds gc: say what to remove (--key, --older-than-days, --incomplete, --keep)",
              file=sys.stderr)
        return EXIT_FAILED
    plan = plan_gc(items, datetime.now(timezone.utc), keys=args.key, older_than_days=args.older_than_days,
                   incomplete=args.incomplete, keep=args.keep)
    refused = [i.key for i, why in plan.kept if i.key in args.key or why.startswith("in use")]
    for item, why in plan.kept:
        print(f"kept {item.kind} {item.key}: {why}")
    freed, busy = 0, []
    for item in plan.remove:
        if args.dry_run:
            print(f"would remove {item.kind} {item.key} ({_mib(item.size_bytes)})")
        elif remove_item(cache, item):
            freed += item.size_bytes
            print(f"removed {item.kind} {item.key} ({_mib(item.size_bytes)})")
        else:
            busy.append(item.key)
            print(f"kept {item.kind} {item.key}: in use (its lock is held, or a process runs under it)")
    if not args.dry_run:
        print(f"{len(plan.remove) - len(busy)} removed, {_mib(freed)} freed")
    return EXIT_FAILED if busy or refused else EXIT_OK


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def dry_run_text(campaign, cache: Path) -> tuple[str, bool]:
    """`servebench build --dry-run`: per build of the campaign, its prerequisites on this host, its key,
    whether the cache has it, and the commands a build runs (with the environment they get on top of
    this one). Whether every prerequisite is met (else the command exits non-zero)."""
    from servebench.builds.builders import inputs_and_key, steps
    from servebench.builds.prerequisites import describe, unmet
    from servebench.builds.venv import BuildError
    from servebench.config.sweep import build_specs
    from servebench.engines import get_engine
    from servebench.offline import NeedsNetwork, no_network

    lines, all_met = [], True
    for kind, spec in build_specs(campaign):
        engine = get_engine(kind)
        if not engine.starts_servers:
            lines.append(f"engine {kind}: {spec.describe()}  nothing to build: its server is not servebench's")
            continue
        prerequisites = engine.build_prerequisites(spec)
        missing = unmet(prerequisites)
        all_met = all_met and not missing
        if missing:
            lines.append(f"engine {kind}: {spec.describe()}  cannot be built here: {len(missing)} of "
                         f"{len(prerequisites)} prerequisite(s) not met")
            lines.append(describe(prerequisites))
            continue
        recipe = engine.build_recipe(spec)
        try:
            with no_network():  # a dry run fetches nothing: what is missing is a line, `build` fetches it
                inputs, key = inputs_and_key(recipe, cache)
                build_env, commands = steps(recipe, cache, key, inputs)
        except NeedsNetwork as exc:
            lines.append(f"engine {kind}: {spec.describe()}  build key not known yet: {exc}")
            continue
        except BuildError as exc:   # a way this host cannot take (target_venv.py): one line, the others go on
            all_met = False
            lines.append(f"engine {kind}: {spec.describe()}  cannot be built here: {exc}")
            continue
        venv = cache / "engines" / key
        cached = (venv / MARKER).exists()
        lines.append(f"engine {kind}: {spec.describe()}  build key {key}  "
                     + ("cached: nothing to build" if cached else "not cached: a build runs"))
        if prerequisites:
            lines.append(describe(prerequisites))
        lines.append(f"  key inputs: {json.dumps(inputs, sort_keys=True)}")
        if build_env:  # once, not on every command: a wheel build's PATH alone is a line
            lines.append("  environment on top of this one: "
                         + " ".join(f"{name}={shlex.quote(value)}" for name, value in build_env.items()))
        for title, argv in commands:
            lines.append(f"  # {title}\n  {shlex.join(argv)}")
    return "\n".join(lines), all_met
