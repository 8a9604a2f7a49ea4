"""`servebench builds list|gc`: the engine builds in the artifact cache (`<cache>/engines/`), and
removing the ones no longer wanted (`servebench/build/cache.py`)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from servebench.build.cache import MARKER, list_entries, remove_entry, select_for_gc
from servebench.cli.common import EXIT_FAILED, EXIT_OK
from servebench.paths import cache_dir


def add_builds_parser(sub) -> None:
    builds = sub.add_parser("builds", help="the engine builds in the cache: list them, remove old ones")
    actions = builds.add_subparsers(dest="builds_action", required=True)
    listing = actions.add_parser("list", help="every build: key, engine and version, size, when built")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_builds_list)
    gc = actions.add_parser("gc", help="remove builds (never one in use: its lock held); say which")
    gc.add_argument("--key", action="append", default=[], help="a build key to remove (repeat)")
    gc.add_argument("--older-than-days", type=float, help="builds not built or touched for this many days")
    gc.add_argument("--incomplete", action="store_true", help="builds that never finished")
    gc.add_argument("--keep", type=int, metavar="N", help="all but the newest N complete builds of each engine and target CPU")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    gc.set_defaults(func=cmd_builds_gc)


def cmd_builds_list(args: argparse.Namespace) -> int:
    entries = list_entries(cache_dir() / "engines")
    if args.json:
        print(json.dumps([e.model_dump(mode="json") for e in entries], indent=1))
        return EXIT_OK
    if not entries:
        print(f"no builds in {cache_dir() / 'engines'}")
    for e in entries:
        state = f"{e.engine} {e.version}" if e.complete else "incomplete"
        print(f"{e.key:<28} {state:<28} {e.size_bytes / 2**20:8.0f} MiB  {e.modified_at:%Y-%m-%d %H:%M}  {e.path}")
    return EXIT_OK


def cmd_builds_gc(args: argparse.Namespace) -> int:
    root = cache_dir() / "engines"
    entries = list_entries(root)
    unknown = sorted(set(args.key) - {e.key for e in entries})
    if unknown:
        print(f"servebench builds gc: no build {', '.join(unknown)} in {root}", file=sys.stderr)
        return EXIT_FAILED
    if not (args.key or args.older_than_days is not None or args.incomplete or args.keep is not None):
        print("servebench builds gc: say what to remove (--key, --older-than-days, --incomplete, --keep)",
              file=sys.stderr)
        return EXIT_FAILED
    chosen = select_for_gc(entries, datetime.now(timezone.utc), keys=args.key, older_than_days=args.older_than_days,
                           incomplete=args.incomplete, keep_per_engine=args.keep)
    freed, busy = 0, []
    for entry in chosen:
        if args.dry_run:
            print(f"would remove {entry.key} ({entry.size_bytes / 2**20:.0f} MiB)")
        elif remove_entry(root, entry.key):
            freed += entry.size_bytes
            print(f"removed {entry.key} ({entry.size_bytes / 2**20:.0f} MiB)")
        else:
            busy.append(entry.key)
            print(f"kept {entry.key}: in use (a build or a run holds its lock)")
    if not args.dry_run:
        print(f"{len(chosen) - len(busy)} build(s) removed, {freed / 2**20:.0f} MiB freed")
    return EXIT_FAILED if busy else EXIT_OK


def dry_run_text(campaign, cache: Path) -> tuple[str, bool]:
    """`servebench build --dry-run`: per build of the campaign, its prerequisites on this host, its key,
    whether the cache has it, and the commands a build runs (with the environment they get on top of
    this one). Whether every prerequisite is met (else the command exits non-zero)."""
    from servebench.build.builders import inputs_and_key, steps
    from servebench.build.prerequisites import describe, unmet
    from servebench.campaign.sweep import build_specs
    from servebench.engines import get_engine

    lines, all_met = [], True
    for kind, spec in build_specs(campaign):
        engine = get_engine(kind)
        prerequisites = engine.build_prerequisites(spec)
        missing = unmet(prerequisites)
        all_met = all_met and not missing
        if missing:
            lines.append(f"engine {kind}: {spec.describe()}  cannot be built here: {len(missing)} of "
                         f"{len(prerequisites)} prerequisite(s) not met")
            lines.append(describe(prerequisites))
            continue
        recipe = engine.build_recipe(spec)
        inputs, key = inputs_and_key(recipe, cache)
        venv = cache / "engines" / key
        cached = (venv / MARKER).exists()
        lines.append(f"engine {kind}: {spec.describe()}  build key {key}  "
                     + ("cached: nothing to build" if cached else "not cached: a build runs"))
        if prerequisites:
            lines.append(describe(prerequisites))
        lines.append(f"  key inputs: {json.dumps(inputs, sort_keys=True)}")
        build_env, commands = steps(recipe, cache, key, inputs)
        if build_env:  # once, not on every command: a wheel build's PATH alone is a line
            lines.append("  environment on top of this one: "
                         + " ".join(f"{name}={shlex.quote(value)}" for name, value in build_env.items()))
        for title, argv in commands:
            lines.append(f"  # {title}\n  {shlex.join(argv)}")
    return "\n".join(lines), all_met
