"""`servebench testbed up|status|down|link|exec`: test hosts on the local machine (docs/testbed.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg

DESCRIPTION = ("N test hosts on the local machine, each with its own address in 198.18.0.0/15, /dev/shm, /tmp, "
               "sshd and slurmd; a Slurm controller on h1. Needs root. See docs/testbed.md.")


def add_testbed_parser(sub) -> None:
    testbed = sub.add_parser("testbed", help="test hosts on the local machine: namespaces, sshd, Slurm (needs root)",
                             description=DESCRIPTION)
    add_actions(testbed)


def add_actions(testbed: argparse.ArgumentParser) -> None:
    from servebench.devtools.testbed.layout import MAX_HOSTS, default_name

    actions = testbed.add_subparsers(dest="action", required=True)
    name_help = f"testbed name (default: $SERVEBENCH_TESTBED or {default_name()!r}); one name, one testbed"

    up = actions.add_parser("up", help="bring a testbed up")
    up.add_argument("--hosts", type=int, required=True, help=f"number of hosts (1-{MAX_HOSTS})")
    up.add_argument("--name", default=None, help=name_help)
    up.add_argument("--cpus", type=int, help="CPUs each host declares to Slurm (default: the machine's)")
    up.add_argument("--share", action="append", default=[], metavar="DIR",
                    help="a directory of the local machine every host sees at the same path, read-only (as a "
                         "cluster's NFS home): campaigns declare it in the provider's shared_paths; repeatable")
    up.add_argument("--keep-on-failure", action="store_true",
                    help="leave a testbed that failed to come up in place, with its logs (then `down`)")
    up.set_defaults(func=cmd_up)

    status = actions.add_parser("status", help="hosts, addresses and daemons of a testbed (or of all)")
    status.add_argument("--name", default=None, help=name_help)
    status.add_argument("--all", action="store_true", help="every testbed on the local machine")
    format_arg(status, ("table", "json"))
    status.set_defaults(func=cmd_status)

    down = actions.add_parser("down", help="stop every daemon and remove namespaces, mounts, links and files")
    down.add_argument("--name", default=None, help=name_help)
    down.set_defaults(func=cmd_down)

    link = actions.add_parser("link", help="set a host link's one-way delay and rate cap (or --clear); no host: "
                              "show the links and what the kernel offers (docs/testbed.md)")
    link.add_argument("--name", default=None, help=name_help)
    link.add_argument("host", nargs="?", help="the host whose link to set: h1, h2 and so on, or `machine` for the "
                      "local machine's own link into the testbed (the orchestrator's: --rate-mbit or --clear "
                      "only); none: show every link")
    link.add_argument("--delay-ms", type=float, default=0.0,
                      help="added to every frame crossing the link, each way (a ping between this host and "
                           "another whose link has no delay: 2x)")
    link.add_argument("--rate-mbit", type=float, help="each direction of the link at most this (Ethernet frames)")
    link.add_argument("--clear", action="store_true",
                      help="the plain link again (each call sets the whole link: what it does not give is off)")
    link.set_defaults(func=cmd_link)

    run = actions.add_parser("exec", help="run a command on a host (in its namespaces), e.g. exec h1 -- sinfo")
    run.add_argument("--name", default=None, help=name_help)
    run.add_argument("host", help="the host: h1, h2 and so on (`testbed status` lists them)")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="command", help="the command (default: a shell)")
    run.set_defaults(func=cmd_exec)


def _name(args: argparse.Namespace) -> str:
    from servebench.devtools.testbed.layout import check_name, default_name

    return check_name(args.name or default_name())


def cmd_up(args: argparse.Namespace) -> int:
    from servebench.devtools.testbed import TestbedError, up

    started = time.monotonic()
    try:
        name = _name(args)
        layout = up(name, args.hosts, args.cpus, keep_on_failure=args.keep_on_failure,
                    log=lambda text: print(text, file=sys.stderr), shared=tuple(args.share))
    except (TestbedError, ValueError) as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"testbed {name}: {len(layout.hosts)} host(s) up in {time.monotonic() - started:.1f} s")
    print(describe(layout))
    return EXIT_OK


def describe(layout) -> str:
    hosts = "\n".join(f"  {h.name}  {h.address}" for h in layout.hosts)
    first = layout.hosts[0].name
    return (f"{hosts}\n"
            f"  machine {layout.machine_address} ({layout.machine_link})\n"
            f"ssh:   ssh -F {layout.ssh_config} {first} hostname\n"
            f"slurm: SLURM_CONF={layout.slurm_conf} sinfo     (or: servebench testbed exec {first} -- sinfo)\n"
            f"down:  servebench testbed down --name {layout.name}")


def cmd_status(args: argparse.Namespace) -> int:
    from servebench.devtools.testbed import known_testbeds, status

    try:
        names = known_testbeds(with_leftovers=True) if args.all else [_name(args)]
    except ValueError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    reports = [with_links(status(name)) for name in names]
    if args.format == "json":
        print(json.dumps(reports if args.all else reports[0], indent=1))
        return EXIT_OK
    if not reports:
        print("no testbed on the local machine")
    for report in reports:
        print(status_text(report))
    if not args.all and not reports[0]["exists"]:
        return EXIT_FAILED
    return EXIT_OK


def with_links(report: dict) -> dict:
    """A testbed's status with its links' delay and rate as the kernel has them (docs/testbed.md)."""
    from servebench.devtools.testbed import load
    from servebench.devtools.testbed.links import link_state
    from servebench.devtools.testbed.machine import netns_exists

    if report.get("hosts"):
        layout = load(report["name"])
        report["links"] = link_state(layout) if netns_exists(layout.switch_netns) else {}
    return report


def status_text(report: dict) -> str:
    name = report["name"]
    if report.get("phase") is None:
        if not report["exists"]:
            return f"testbed {name}: not up"
        return (f"testbed {name}: remains without a state file: {', '.join(report['leftovers']) or report['state_dir']}"
                f"; servebench testbed down --name {name}")
    lines = [f"testbed {name}: {report['phase']}, subnet {report['subnet']}, machine {report['machine_address']} "
             f"({report['machine_link']}{'' if report['machine_link_up'] else ': missing'})"]
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    machine = report["machine_daemons"]
    lines.append("  machine  " + "  ".join(f"{n} {d['pid']} {'alive' if d['alive'] else 'DEAD'}"
                                           for n, d in machine.items()))
    for host in report["hosts"]:
        daemons = "  ".join(f"{n} {d['pid']} {'alive' if d['alive'] else 'DEAD'}" for n, d in host["daemons"].items())
        lines.append(f"  {host['name']:<4} {host['address']:<15} {'' if host['netns'] else '(no netns) '}"
                     f"slurm {host['slurm'] or '?'}  {daemons}")
    if report.get("links"):
        from servebench.devtools.testbed.links import state_lines

        lines += state_lines(report["links"])
    lines.append(f"  ssh -F {report['ssh_config']} h1   |   SLURM_CONF={report['slurm_conf']} sinfo")
    return "\n".join(lines)


def cmd_down(args: argparse.Namespace) -> int:
    from servebench.devtools.testbed import TestbedError, down
    from servebench.devtools.testbed.machine import require_root

    started = time.monotonic()
    try:
        name = _name(args)
        require_root()
        left = down(name, log=lambda text: print(text, file=sys.stderr))
    except (TestbedError, ValueError) as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if left:
        print(f"servebench: testbed {name}: left behind: " + "; ".join(left), file=sys.stderr)
        return EXIT_FAILED
    print(f"testbed {name}: down in {time.monotonic() - started:.1f} s, nothing left")
    return EXIT_OK


def cmd_link(args: argparse.Namespace) -> int:
    from servebench.devtools.testbed import TestbedError, links, load

    try:
        layout = load(_name(args))
        if args.host is None:
            if args.clear or args.delay_ms or args.rate_mbit is not None:
                raise ValueError("name the host: link h2 --delay-ms 5")
            print(links.offers_text(links.kernel_offers()))
            print("\n".join(links.state_lines(links.link_state(layout))))
            return EXIT_OK
        if args.clear and (args.delay_ms or args.rate_mbit is not None):
            raise ValueError("--clear, or --delay-ms/--rate-mbit: not both")
        if not args.clear and not args.delay_ms and args.rate_mbit is None:
            raise ValueError("give --delay-ms and/or --rate-mbit, or --clear")
        if args.host == "machine":
            return machine_link(layout, args)
        state = links.set_link(layout, args.host, args.delay_ms, args.rate_mbit)
    except (TestbedError, ValueError, KeyError) as exc:
        print(f"servebench: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"testbed {layout.name}, link {args.host}: {state['setting']}")
    print("\n".join(links.state_lines({args.host: state})))
    return EXIT_FAILED if state["problems"] else EXIT_OK


def machine_link(layout, args: argparse.Namespace) -> int:
    """The machine's own link: a rate cap each way, or none (a delay there would delay every host's
    traffic with the orchestrator alike: set it on the hosts' links)."""
    from servebench.devtools.testbed import links

    if args.delay_ms:
        print("servebench: the machine's link takes --rate-mbit or --clear; delay the hosts' links instead",
              file=sys.stderr)
        return EXIT_FAILED
    kinds = links.set_machine_rate(layout, None if args.clear else args.rate_mbit)
    capped = all(kind == "tbf" for kind in kinds.values())
    print(f"testbed {layout.name}, the machine's link: "
          + (f"at most {args.rate_mbit:g} Mbit/s each way" if capped else "no rate cap"))
    return EXIT_OK if capped == (not args.clear) else EXIT_FAILED


def cmd_exec(args: argparse.Namespace) -> int:
    from servebench.devtools.testbed import TestbedError, enter_argv, load

    try:
        layout = load(_name(args))
        host = layout.host(args.host)
    except (TestbedError, ValueError, KeyError) as exc:
        print(f"servebench: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return EXIT_FAILED
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    command = command or [os.environ.get("SHELL") or "/bin/sh"]
    workdir = os.getcwd() if os.path.isdir(os.getcwd()) else "/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    argv = enter_argv(layout, host, workdir) + command
    os.execvpe(argv[0], argv, env)  # the host's processes are this process: signals and exit code pass through


def main(argv: list[str] | None = None) -> int:
    """`python -m servebench.cli.testbed up|status|down|link|exec ...`: `servebench testbed` on its own."""
    parser = argparse.ArgumentParser(prog="servebench testbed", description=DESCRIPTION)
    add_actions(parser)
    args = parser.parse_args(argv)
    return args.func(args) or EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
