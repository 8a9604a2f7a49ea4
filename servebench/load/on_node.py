"""The load generator's process, as a cell starts it, on a client node or on the orchestrator's host:
`python -S -m servebench.load.on_node --config-json J --output-json R --requests-csv C [--progress-file P]`.

On a node it runs from the tree `servebench.distribution.load_tree` places there (its files named
RESULT_NAME and REQUESTS_NAME in one directory, which the flow brings back). It imports nothing but
the load generator (no warehouse, Prefect, engine or command line: its start is a cell's fixed cost).
It writes the requests CSV, then the result JSON last and atomically: its presence means both are complete.
The result goes through its model (servebench/load/result.py): the tree carries pydantic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from servebench.load.config import LoadConfig
from servebench.load.progress_file import progress_file
from servebench.load.records import write_requests_csv
from servebench.load.result import write_result
from servebench.load.runner import LiveCounts, run_load_result
from servebench.load.workload import WorkloadError

RESULT_NAME = "result.json"
REQUESTS_NAME = "requests.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="servebench.load.on_node", description=__doc__.splitlines()[0])
    parser.add_argument("--config-json", required=True, help="a LoadConfig as JSON")
    parser.add_argument("--output-json", required=True, type=Path, help="write the result here")
    parser.add_argument("--requests-csv", required=True, type=Path, help="write the request rows here")
    parser.add_argument("--progress-file", help="keep {sent, done, failed} here while the load runs")
    args = parser.parse_args(argv)
    live = LiveCounts()
    try:
        config = LoadConfig.model_validate_json(args.config_json)
        with progress_file(args.progress_file, live):
            result = run_load_result(config, live)
    except (ValidationError, WorkloadError) as exc:
        print(f"servebench.load.on_node: {exc}", file=sys.stderr)
        return 2
    write_requests_csv((record.to_dict() for record in result.requests), args.requests_csv)
    write_result(result, args.output_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
