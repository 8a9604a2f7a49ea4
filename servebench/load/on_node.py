"""The load generator on a client node: `python -S -m servebench.load.on_node --config-json J --output-dir D`.

What the campaign flow starts on the node a campaign names (`load.client.node`), from the
tree `servebench.distribution.load_tree` places there. It imports nothing but the load generator:
no warehouse, no Prefect, no engine. It writes `requests.csv`, then `result.json` last and
atomically (its presence means both are complete), into D, which the flow brings back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from servebench.load.config import LoadConfig
from servebench.load.records import write_requests_csv
from servebench.load.runner import run_load, write_result
from servebench.load.workload import WorkloadError

RESULT_NAME = "result.json"
REQUESTS_NAME = "requests.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="servebench.load.on_node", description=__doc__.splitlines()[0])
    parser.add_argument("--config-json", required=True, help="a LoadConfig as JSON")
    parser.add_argument("--output-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        config = LoadConfig.model_validate_json(args.config_json)
        result = run_load(config)
    except (ValidationError, WorkloadError) as exc:
        print(f"servebench.load.on_node: {exc}", file=sys.stderr)
        return 2
    write_requests_csv(result["requests"], args.output_dir / REQUESTS_NAME)
    write_result(result, args.output_dir / RESULT_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
