"""The load balancer in front of a `replicas: N` mode: nginx proxying one endpoint to the mode's N
independent servers. Which nginx: the campaign's `balancing.nginx`, else `nginx` on PATH, else Debian's
/usr/sbin/nginx (servebench/planning/balancing.py, which also decides whether nginx balances at all: without
one, the load generator spreads the requests itself).

Why nginx and where (docs/parallel-modes.md, "Replicas behind a balancer"): it is the balancer most
deployments put in front of OpenAI-compatible servers, it streams (HTTP/1.1 to the replicas, no
buffering, so a token reaches the client when the replica sends it), it has both policies
(`least_conn`, and round-robin as its default) and an access log that names the replica of every
request (`$upstream_addr`). It runs where the load generator runs: on the client node through the
provider (`load.client.node`), else on this host as a process of the orchestrator's, like the
telemetry scraper. So the balancer shares no CPU with a server, as a balancer box would not.

Everything nginx writes is in the run directory (`balancer/<mode>/`: its config, error log, access
log, pid file and temp directories; `-p`, `-e` and every `*_temp_path` set, so nothing goes to
/var): the config and logs are what the run keeps. It is started in the foreground (`daemon off`)
and stopped by PID with everything it spawned, like every other process of a run (under `/bin/sh -c`, which
keeps the run's process mark that nginx's process title overwrites: `marked_argv`).

Authentication: nginx passes the client's `Authorization` header on to the replicas (its default for
every request header), and with the run's token it checks the header itself under /v1/ (as vLLM does):
`auth_include` names a file of the run's secret directory (`AUTH_INCLUDE`, mode 0600, next to the token
and copied with it) that holds the one `if` line with the token, so nginx.conf, which the run keeps and
`servebench plan` prints, names only the file.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from servebench.planning.balancing import SYSTEM_NGINX, BalancingChoice, choice_here, find_nginx
from servebench.processes import ManagedProcess
from servebench.providers import Node, NodeProcess, Provider, node_tools

NGINX = SYSTEM_NGINX                         # Debian's nginx-light or nginx package, when none is named or on PATH
POLICY_DIRECTIVES = {"least-connections": "least_conn;", "round-robin": ""}  # round-robin: nginx's default
TEMP_DIRS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")            # every temp path nginx was built with
READ_TIMEOUT_S = 3600                        # a long streamed answer, or a request queued behind others
# one line a request: its time, the replica it went to (several, comma separated, when nginx tried more than
# one), its status and path, seconds in all and at the replica
ACCESS_FORMAT = "$msec $upstream_addr $status $request_method $request_uri $request_time $upstream_response_time"


class BalancerFailed(Exception):
    pass


@dataclass
class Balancer:
    """A running nginx in front of a mode's replicas, its files in the run directory."""

    mode: str
    policy: str                            # least-connections or round-robin
    url: str                               # the one endpoint the load generator and the gate use
    instances: dict[str, str]              # replica name -> its own URL ({"r0": "http://127.0.1.1:8000"})
    directory: Path                        # balancer/<mode>/ in the run directory: config and logs
    process: NodeProcess
    node: Node | None = None               # the client node it runs on; None: this host
    remote_dir: str | None = None          # its directory on the client node, when that node does not share ours
    stopped: bool = False
    requests: dict[str, int] = field(default_factory=dict)  # requests each replica served, read at the stop

    @property
    def access_log(self) -> Path:
        return self.directory / "access.log"

    @property
    def error_log(self) -> Path:
        return self.directory / "error.log"


AUTH_INCLUDE = "nginx-auth.conf"          # in the run's secret directory, beside the token
PROXY = """            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_connect_timeout 10s;
            proxy_read_timeout {timeout}s;
            proxy_send_timeout {timeout}s;"""


def auth_include_text(token: str) -> str:
    """The include that refuses a request without `Authorization: Bearer <token>` (401, as vLLM answers)."""
    if not token or any(c in token for c in '"\\$;{} \t\n'):
        raise ValueError("a token for nginx must be non-empty, without quotes, '$', ';', braces or spaces")
    return f'if ($http_authorization != "Bearer {token}") {{ return 401 "unauthorized\\n"; }}\n'


def write_auth_include(secret_dir: Path, token: str) -> Path:
    """The include file in the run's secret directory, mode 0600 from its creation on."""
    path = secret_dir / AUTH_INCLUDE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(auth_include_text(token))
    return path


def nginx_config(instances: dict[str, str], policy: str, listen: str, prefix: str,
                 auth_include: str | None = None) -> str:
    """nginx.conf for one endpoint over the replicas: one worker (its connection counts are then exact for
    least_conn, and one event loop is plenty for a CPU cluster's request rates), HTTP/1.1 with keepalive to
    the replicas, no buffering either way (streamed tokens pass at once), long timeouts, and the replica of
    every request in the access log. `/metrics` answers 404: one replica's counters are not the mode's, so a
    reader of counters (the load generator's token check) skips them rather than compare half the tokens.
    With `auth_include` (the path of `AUTH_INCLUDE` where nginx runs) a request under /v1/ without the run's
    token is refused by nginx itself; the header goes on to the replicas either way."""
    if policy not in POLICY_DIRECTIVES:
        raise ValueError(f"balancer policy {policy!r}: one of {', '.join(POLICY_DIRECTIVES)}")
    servers = "\n".join(f"        server {urlsplit(url).netloc} max_fails=0;  # {name}"
                        for name, url in instances.items())
    temps = "\n".join(f"    {name}_temp_path {prefix}/temp/{name};" for name in TEMP_DIRS)
    policy_line = f"        {POLICY_DIRECTIVES[policy]}\n" if POLICY_DIRECTIVES[policy] else ""
    proxy = PROXY.format(timeout=READ_TIMEOUT_S)
    guarded = (f"        location /v1/ {{\n            include {auth_include};\n{proxy}\n        }}\n"
               if auth_include else "")
    return f"""# servebench: the balancer of a replicas mode ({policy}); started as
#   nginx -p {prefix} -c {prefix}/nginx.conf -e {prefix}/error.log -g 'daemon off; pid {prefix}/nginx.pid;'
worker_processes 1;
lock_file {prefix}/nginx.lock;
error_log {prefix}/error.log notice;
events {{ worker_connections 4096; }}
http {{
{temps}
    log_format replicas '{ACCESS_FORMAT}';
    access_log {prefix}/access.log replicas;
    client_body_buffer_size 4m;      # a request body stays in memory: the temp directory stays empty
    client_max_body_size 64m;
    upstream replicas {{
{policy_line}{servers}
        keepalive 64;
    }}
    server {{
        listen {listen};
        location = /metrics {{ return 404 "a replicas mode: each replica's /metrics is its own\\n"; }}
{guarded}        location / {{
{proxy}
        }}
    }}
}}
"""


def nginx_argv(prefix: str, nginx: str = NGINX) -> list[str]:
    """nginx in the foreground with its prefix, config, error log and pid file in `prefix`."""
    return [nginx, "-p", prefix, "-c", f"{prefix}/nginx.conf", "-e", f"{prefix}/error.log",
            "-g", f"daemon off; pid {prefix}/nginx.pid;"]


# the shell around nginx: SIGTERM to it (a resume stopping the run's marked processes one by one) reaches nginx
SUPERVISOR = ('trap \'kill -TERM "$n" 2>/dev/null\' TERM INT; {command} & n=$!; wait "$n"; s=$?; '
              'while kill -0 "$n" 2>/dev/null; do wait "$n"; s=$?; done; exit "$s"')


def marked_argv(argv: list[str]) -> list[str]:
    """nginx under a shell that keeps the run's process mark: nginx writes its process title over its
    environment, where the mark is read from (a resume stops by that mark, process by process, what a killed
    orchestrator left), so the shell carries the mark and passes a SIGTERM on to nginx. Its exit code is nginx's."""
    return ["/bin/sh", "-c", SUPERVISOR.format(command=shlex.join(argv))]


def write_config(directory: Path, instances: dict[str, str], policy: str, listen: str, prefix: str,
                 auth_include: str | None = None) -> Path:
    """The balancer's directory: nginx.conf and the temp directories (nginx creates none it is not told of)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in TEMP_DIRS:
        (directory / "temp" / name).mkdir(parents=True, exist_ok=True)
    config = directory / "nginx.conf"
    config.write_text(nginx_config(instances, policy, listen, prefix, auth_include))
    return config


@dataclass(frozen=True)
class Upstreams:
    """What one balancer fronts: the mode, its policy, its replicas' URLs by name, and the nginx binary where
    it runs (None: looked up there, `nginx` on PATH, else /usr/sbin/nginx)."""

    mode: str
    policy: str
    instances: dict[str, str]
    nginx: str | None = None


def start_balancer(provider: Provider, client: Node | None, mode: str, policy: str, instances: dict[str, str],
                   run_dir: Path, mark: str, auth_include: str | None = None) -> Balancer:
    """`start_nginx` with the nginx that is on PATH where it runs (else /usr/sbin/nginx)."""
    return start_nginx(provider, client, Upstreams(mode, policy, instances), run_dir, mark, auth_include)


def start_nginx(provider: Provider, client: Node | None, upstreams: Upstreams, run_dir: Path, mark: str,
                auth_include: str | None = None) -> Balancer:
    """nginx for the mode's replicas: on the client node through the provider (its directory copied there when
    that node does not share ours), else on this host; listening on a free port of that node (this host: the
    loopback). `mark`: the run's process mark, so a resume finds a balancer left by a killed orchestrator.
    `auth_include`: the token's include file where nginx runs (placed there already), or None."""
    mode, policy, instances = upstreams.mode, upstreams.policy, upstreams.instances
    directory = Path(run_dir) / "balancer" / mode
    if directory.exists():   # a restart of the mode's server: the earlier balancer's files go aside, kept
        kept = directory.with_name(f"{mode}.{len(list(directory.parent.glob(f'{mode}.*'))) + 2}")
        directory.rename(kept)
    if client is None:
        binary = upstreams.nginx or find_nginx().binary
        if binary is None:
            raise BalancerFailed(f"mode {mode}: no nginx on this host (looked for: PATH, then {NGINX}): name one "
                                 "(`balancing: {nginx: PATH}`) or let the load generator balance "
                                 "(`balanced_by: client`)")
        address = "127.0.0.1"
        port = node_tools.free_port(address)
        write_config(directory, instances, policy, f"{address}:{port}", str(directory), auth_include)
        env = os.environ | {node_tools.MARK_VARIABLE: mark}
        argv = marked_argv(nginx_argv(str(directory), binary))
        process: NodeProcess = ManagedProcess.start(argv, env=env, log_path=directory / "nginx.log")
        return Balancer(mode=mode, policy=policy, url=f"http://{address}:{port}", instances=instances,
                        directory=directory, process=process)
    port = provider.free_port(client)
    shared = provider.shares(str(directory.parent))
    remote = str(directory) if shared else f"{provider.scratch_dir(client)}/balancer/{mode}"
    write_config(directory, instances, policy, f"{client.address}:{port}", remote, auth_include)
    if not shared:
        provider.put_tree(client, directory, remote)
    process = provider.start(client, marked_argv(nginx_argv(remote, upstreams.nginx or NGINX)),
                             {node_tools.INSTRUMENT_VARIABLE: "1"}, directory / "nginx.log")
    return Balancer(mode=mode, policy=policy, url=f"http://{client.address}:{port}", instances=instances,
                    directory=directory, process=process, node=client, remote_dir=None if shared else remote)


def check_balancer(balancer: Balancer) -> None:
    """Raise with nginx's own words if it has exited (a config it refused, a port taken)."""
    if balancer.process.alive():
        return
    balancer.process.fetch_log()
    said = "\n".join(text.read_text(errors="replace")[-2000:] for text in (balancer.directory / "nginx.log",
                                                                            balancer.error_log) if text.exists())
    raise BalancerFailed(f"the balancer (nginx) of mode {balancer.mode} exited with code "
                         f"{balancer.process.exit_code()}; {balancer.directory}:\n{said}")


def stop_balancer(provider: Provider, balancer: Balancer) -> dict[str, int]:
    """Stop nginx by PID (with its worker), bring its logs back from the client node, and count the
    requests each replica served from its access log."""
    if balancer.stopped:
        return balancer.requests
    try:
        if balancer.node is None:
            _stop_here(balancer.process)
        else:
            provider.stop(balancer.process)
    finally:
        balancer.stopped = True
    if balancer.node is not None and balancer.remote_dir is not None:
        provider.get_tree(balancer.node, balancer.remote_dir, balancer.directory)
    balancer.requests = requests_per_replica(balancer.access_log, balancer.instances)
    return balancer.requests


def _stop_here(process: NodeProcess) -> None:
    """A balancer on this host: a ManagedProcess of the orchestrator's (stopped with its process group)."""
    assert isinstance(process, ManagedProcess)
    process.stop(grace_s=10)


def requests_per_replica(access_log: Path, instances: dict[str, str]) -> dict[str, int]:
    """Completions each replica answered (POSTs in the access log, by `$upstream_addr`; the last address
    when nginx tried several), every replica named even at 0."""
    by_address = {urlsplit(url).netloc: name for name, url in instances.items()}
    counts = {name: 0 for name in instances}
    if not access_log.exists():
        return counts
    for line in access_log.read_text(errors="replace").splitlines():
        fields = line.split(" ")
        if len(fields) < 5 or "POST" not in fields:
            continue
        method_at = fields.index("POST")
        upstream = " ".join(fields[1:method_at - 1]).split(",")[-1].strip()
        if upstream in by_address:
            counts[by_address[upstream]] += 1
    return counts


def plan_lines(mode: str, policy: str, instances: dict[str, str], where: str,
               choice: BalancingChoice | None = None) -> list[str]:
    """What `servebench plan` says of a mode's balancing: who balances and why (`choice`; None: the defaults
    on this host, nginx on PATH or at /usr/sbin/nginx, else the load generator), then nginx's line (where it
    runs, its policy, its upstreams, its command) or the replicas the load generator sends to."""
    choice = choice or default_choice()
    upstreams = ", ".join(f"{name} {url}" for name, url in instances.items())
    if choice.by == "client":
        return [choice.line(mode, policy), f"  balancer none: the load generator on {where} sends to {upstreams}"]
    prefix = f"RUN_DIR/balancer/{mode}"
    directive = POLICY_DIRECTIVES[policy] or "nginx's default"
    return [choice.line(mode, policy), f"  balancer nginx {policy} ({directive}) on {where}, at PORT: {upstreams}",
            "    " + shlex.join(marked_argv(nginx_argv(prefix, choice.nginx or NGINX)))]


def default_choice() -> BalancingChoice:
    """The balancing of a replicas mode on this host when the caller gives no choice: what a campaign that
    chooses nothing gets (nginx found here: that nginx, unless the campaign's fields choose the load generator,
    which this line was not told)."""
    choice = choice_here(find_nginx(), "")
    if choice.by == "client":
        return choice
    return replace(choice, why=choice.why + " (unless the mode's balanced_by or the campaign's balancing.by is "
                   "client)")
