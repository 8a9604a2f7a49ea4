"""`servebench build`: build (or find in the cache) every engine build a campaign needs, and print
where each is; `--dry-run` says what a build would run instead."""

from __future__ import annotations

import argparse
import sys

from servebench.campaign.loading import load_campaign
from servebench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, campaign_arg


def add_build_parser(sub: argparse._SubParsersAction) -> None:
    build = sub.add_parser("build", help="build (or find in the cache) every engine build a campaign needs and "
                           "print where each is")
    campaign_arg(build)
    build.add_argument("--dry-run", action="store_true",
                       help="print each engine's build key, whether it is cached, and the exact commands and "
                            "environment a build runs; build nothing")
    build.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    from servebench.builds.builders import ensure
    from servebench.builds.prerequisites import PrerequisiteError, require
    from servebench.builds.recipe import VenvRecipe
    from servebench.builds.target_venv import chosen_way
    from servebench.builds.venv import BuildError
    from servebench.cli.builds import dry_run_text
    from servebench.config.sweep import build_specs
    from servebench.engines import get_engine
    from servebench.paths import cache_dir

    campaign = load_campaign(args.file)   # refuses nginx asked for where there is none (planning/balancing.py)
    if args.dry_run:
        text, all_met = dry_run_text(campaign, cache_dir())
        print(text)
        if balancing := balancing_text(campaign):
            print(balancing)
        for note in way_notes(campaign):
            print(note)
        return EXIT_OK if all_met else EXIT_FAILED
    built = [(kind, spec) for kind, spec in build_specs(campaign) if get_engine(kind).starts_servers]
    for kind, spec in build_specs(campaign):
        if (kind, spec) not in built:
            print(f"engine {kind}: {spec.describe()}: nothing to build, its server is not servebench's")
    try:   # every build's needs before the first starts: a refusal after an hour's x86 build helps nobody
        for kind, spec in built:
            require(get_engine(kind).build_prerequisites(spec), f"engine {kind}: {spec.describe()}")
            recipe = get_engine(kind).build_recipe(spec)
            if isinstance(recipe, VenvRecipe) and recipe.platform is not None:   # for another architecture
                chosen_way(recipe)   # the way this host can take, or why none (one line)
    except (PrerequisiteError, BuildError) as exc:
        print(f"servebench build: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for kind, spec in built:
        try:
            build = ensure(get_engine(kind).build_recipe(spec), cache_dir(),
                           log=lambda text: print(text, file=sys.stderr))
        except KeyboardInterrupt:
            print(f"servebench build: interrupted while building {kind} ({spec.describe()}): the builds printed "
                  "above are cached, this one is not (ccache keeps what it compiled)", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BuildError as exc:   # a failed step (its log named) or a way this host cannot take: one line
            print(f"servebench build: engine {kind} ({spec.describe()}): {exc}", file=sys.stderr)
            return EXIT_FAILED
        state = "cached" if build.build_seconds is None else f"built in {build.build_seconds:.0f} s"
        print(f"{build.key} ({spec.describe()} -> {build.engine_version}, {state})")
        print(build.python if build.python_version else build.venv_path)  # a cmake build: its binaries' directory
    return EXIT_OK


def balancing_text(campaign) -> str:
    """The dry run's lines for the replicas modes: who balances each (nginx, which binary; or the load
    generator, and why); nothing for a campaign without replicas."""
    from servebench.builds.prerequisites import describe
    from servebench.planning.balancing import balancing_prerequisites

    rows = balancing_prerequisites(campaign)
    return f"replicas modes' balancing:\n{describe(rows)}" if rows else ""


def way_notes(campaign) -> list[str]:
    """The dry run's notes on the way each venv for another architecture is made here, where that way
    meets the campaign's emulated nodes (target_venv.py); a way this host cannot take is in the checklist."""
    from servebench.builds.recipe import VenvRecipe
    from servebench.builds.target_venv import choose_way, emulated_nodes_note, host_facts
    from servebench.builds.venv import BuildError
    from servebench.config.sweep import build_specs
    from servebench.engines import get_engine
    from servebench.platform.targets import profile

    notes: list[str] = []
    for kind, spec in build_specs(campaign):
        if not get_engine(kind).starts_servers:
            continue
        recipe = get_engine(kind).build_recipe(spec)
        if not isinstance(recipe, VenvRecipe) or recipe.platform is None:
            continue
        platform = recipe.platform
        emulated = [n.name for n in campaign.provider.node_specs()
                    if n.emulate and profile(n.emulate).arch == platform.arch]
        try:
            note = emulated_nodes_note(choose_way(platform.arch, host_facts(platform)), platform, emulated)
        except BuildError:
            continue
        if note and note not in notes:
            notes.append(note)
    return notes
