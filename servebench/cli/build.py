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
    from servebench.cli.builds import dry_run_text
    from servebench.config.sweep import build_specs
    from servebench.engines import get_engine
    from servebench.paths import cache_dir

    campaign = load_campaign(args.file)
    if args.dry_run:
        text, all_met = dry_run_text(campaign, cache_dir())
        print(text)
        return EXIT_OK if all_met else EXIT_FAILED
    try:
        for kind, spec in build_specs(campaign):
            require(get_engine(kind).build_prerequisites(spec), f"engine {kind}: {spec.describe()}")
    except PrerequisiteError as exc:
        print(f"servebench build: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for kind, spec in build_specs(campaign):
        try:
            build = ensure(get_engine(kind).build_recipe(spec), cache_dir(),
                           log=lambda text: print(text, file=sys.stderr))
        except KeyboardInterrupt:
            print(f"servebench build: interrupted while building {kind} ({spec.describe()}): the builds printed "
                  "above are cached, this one is not (ccache keeps what it compiled)", file=sys.stderr)
            return EXIT_INTERRUPTED
        state = "cached" if build.build_seconds is None else f"built in {build.build_seconds:.0f} s"
        print(f"{build.key} ({spec.describe()} -> {build.engine_version}, {state})")
        print(build.python if build.python_version else build.venv_path)  # a cmake build: its binaries' directory
    return EXIT_OK
