"""`servebench chaos RUN_ID kill|stop --match REGEX [--node NAME]`: a fault, now, in a running campaign.

For rehearsing a cluster's faults by hand, and for tests: SIGKILL (`kill`) or SIGSTOP (`stop`) the
processes of that run (only those carrying its mark) on one of its nodes whose command line
matches REGEX, as the campaign's own `faults:` would (`servebench/serving/faults.py`). The run
goes on and its checks find the cause; this prints what was hit. Nodes on this host, ssh hosts,
and a Slurm allocation's nodes (a step beside the campaign's: `srun --overlap --jobid J`; the
allocation stays the campaign's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servebench import warehouse
from servebench.cli.common import warehouse_arg, warehouse_path


def add_chaos_parser(sub) -> None:
    p = sub.add_parser("chaos", help="inject a fault into a running campaign now (kill or stop processes of a run)",
                       description=" ".join(__doc__.split()))
    p.add_argument("run_id", help="the running campaign's run id (`servebench runs` lists them)")
    p.add_argument("action", choices=["kill", "stop"], help="kill: SIGKILL the matching processes; stop: "
                   "SIGSTOP them (alive but frozen, as a hung process is)")
    p.add_argument("--match", required=True, help="regular expression over the command lines of the run's "
                   "processes on the node: a worker's process title, the API server's module "
                   "(docs/faults-and-resume.md lists some)")
    p.add_argument("--node", help="the node (default: the campaign's first)")
    warehouse_arg(p)
    p.set_defaults(func=cmd_chaos)


def cmd_chaos(args: argparse.Namespace) -> int:
    from servebench.campaign.loading import parse_campaign
    from servebench.config.campaign import FaultSpec
    from servebench.providers import get_provider
    from servebench.providers.base import ATTACH
    from servebench.serving.faults import inject
    from servebench.warehouse import landing

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        run = landing.run_record(con, args.run_id)
    finally:
        con.close()
    if run is None:
        print(f"servebench chaos: no run {args.run_id} in {warehouse_path(args)}", file=sys.stderr)
        return 2
    copy = Path(run["run_dir"]) / "campaign.yaml"
    campaign = parse_campaign(copy.read_text(), source=str(copy), base_dir=Path(run["campaign_file"]).parent)
    provider = get_provider(campaign, run_id=args.run_id)
    attached = ATTACH in provider.capabilities  # a scheduler's allocation: joined, never released from here
    if attached:
        try:
            provider.attach(json.loads(run["allocation"] or "{}"))
        except Exception as exc:
            print(f"servebench chaos: {exc}", file=sys.stderr)
            return 2
    nodes = {node.name: node for node in provider.nodes()}
    node = nodes.get(args.node) if args.node else next(iter(nodes.values()))
    if node is None:
        print(f"servebench chaos: the run has no node {args.node!r}; its nodes: {', '.join(nodes)}", file=sys.stderr)
        return 2
    try:
        done = inject(provider, node, FaultSpec(cell="(chaos)", at_s=0, action=args.action, node=node.name,
                                                match=args.match))
    finally:
        if not attached:
            provider.release()  # nothing was started; closes an ssh provider's connections
    print(done.describe())
    print(json.dumps({"node": done.node, "hit": done.hit, "error": done.error}))
    return 0 if done.hit else 1
