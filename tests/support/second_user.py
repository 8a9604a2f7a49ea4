"""Another user of the testbed, on another host, probing what a run leaves reachable while it runs.

`SecondUser` watches the campaign's hosts from a thread while the flow runs: it finds the run's servers
(the processes carrying the run's mark, by their command lines: vLLM's API server, llama-server, the nginx
balancer, ggml-rpc-server, each node's `ray start` with its GCS or raylet port) and, once each answers, probes
it from another testbed host's namespaces as the machine's `nobody` (who holds no token) with the system's python3 and
curl, pinned to CPU 1 so that no server core of the campaign is taken from it. HTTP servers get each route
without a key; Ray's GCS and raylets get gRPC calls (curl over HTTP/2, an empty request message) without a
token, which Ray's token authentication answers with gRPC status 16 (UNAUTHENTICATED) before any handler
runs. The same call to the GCS with the run's token, made as root, is the control: it must answer 0, or a
refusal would prove nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from dataclasses import dataclass, field

from tests.support.testbed import on_host

UNAUTHENTICATED = 16
# what the probe asks of each kind of server without a key (the body a POST sends is one any of them reads)
HTTP_ROUTES = {
    "vllm": [("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/metrics")],
    "llama-server": [("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/slots"),
                     ("GET", "/metrics")],
    "balancer": [("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/completions")],
}
# a state read, the job table, a job's first step, the KV store; a raylet's stats and its config
GCS_CALLS = ["ray.rpc.NodeInfoGcsService/GetAllNodeInfo", "ray.rpc.JobInfoGcsService/GetAllJobInfo",
             "ray.rpc.JobInfoGcsService/GetNextJobID", "ray.rpc.InternalKVGcsService/InternalKVKeys"]
RAYLET_CALLS = ["ray.rpc.NodeManagerService/GetNodeStats", "ray.rpc.NodeManagerService/GetSystemConfig"]

# the run's processes in the host's network namespace: those carrying its mark, and nginx's master, whose title
# (`nginx: master process ... -c CONF`) overwrites its command line and environment
SERVICES_ON_HOST = r"""me=$(readlink /proc/self/ns/net)
for f in $(grep -l SERVEBENCH_PROCESS= /proc/[0-9]*/environ 2>/dev/null) \
         $(grep -l '^nginx: master process' /proc/[0-9]*/cmdline 2>/dev/null); do
  d=${f%/*}
  [ "$(readlink $d/ns/net 2>/dev/null)" = "$me" ] || continue
  printf '%s\t' "${d#/proc/}"; tr '\0' '\037' < $d/cmdline; printf '\t'
  tr '\0' '\n' < $d/environ | grep '^RAY_AUTH_TOKEN_PATH=' | head -1; echo
done"""

PROBE = r"""
import json, subprocess, sys, urllib.error, urllib.request
found = []
for target in json.loads(sys.argv[1]):
    if target["kind"] == "http":
        body = json.dumps({"prompt": "hi", "model": "m", "max_tokens": 2}).encode()
        body = body if target["method"] == "POST" else None
        request = urllib.request.Request(target["url"], data=body, method=target["method"],
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError as error:
            status = f"unreachable: {error}"
    else:
        done = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "20", "-X", "POST",
                               "-H", "content-type: application/grpc", "-H", "te: trailers", "--data-binary", "@-",
                               "-D", "-", "-o", "/dev/null", target["url"]], input=b"\0\0\0\0\0", capture_output=True)
        codes = [line.split(b":", 1)[1].strip() for line in done.stdout.splitlines()
                 if line.lower().startswith(b"grpc-status:")]
        status = int(codes[-1]) if codes else f"no grpc-status (curl {done.returncode}: {done.stderr[-200:]!r})"
    found.append([target["what"], status])
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Service:
    """A server of the run on a host: what it is, where it answers, and (Ray) the token file its node reads."""

    what: str                      # vllm | llama-server | balancer | rpc | gcs | raylet
    host: str
    address: str
    port: int
    token_path: str | None = None


def _flag(argv: list[str], *names: str) -> str | None:
    for name in names:
        if name in argv and argv.index(name) + 1 < len(argv):
            return argv[argv.index(name) + 1]
    return None


def on_cpu1(layout, host, script: str) -> str:
    """stdout of a shell script run inside the host, on CPU 1 (where no server of the campaign runs)."""
    return on_host(layout, host, script, cpus="1")


def _nginx_listen(layout, host, argv: list[str]) -> tuple[str, int] | None:
    conf = _flag(argv, "-c")
    text = on_cpu1(layout, host, f"cat {conf}") if conf else ""
    match = re.search(r"^\s*listen\s+([0-9.]+):(\d+)", text, re.MULTILINE)
    return (match.group(1), int(match.group(2))) if match else None


def services_on(layout, host) -> list[Service]:
    """The run's servers on the host, from the command lines of its marked processes."""
    found = []
    for line in on_cpu1(layout, host, SERVICES_ON_HOST).splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        argv = parts[1].split("\x1f")
        token = parts[2].split("=", 1)[1] if len(parts) > 2 and "=" in parts[2] else None
        found += _services_of(layout, host, argv, token)
    return found


def _services_of(layout, host, argv: list[str], token: str | None) -> list[Service]:
    program = " ".join(argv[:3])
    if "start" in argv and "--node-manager-port" in argv:   # a Ray node's `ray start --block`
        address = _flag(argv, "--node-ip-address") or host.address
        ray = [Service("raylet", host.name, address, int(_flag(argv, "--node-manager-port") or 0), token)]
        if "--head" in argv:
            ray.append(Service("gcs", host.name, address, int(_flag(argv, "--port") or 0), token))
        return ray
    if "--served-model-name" in argv and "--port" in argv:
        return [Service("vllm", host.name, _flag(argv, "--host") or host.address, int(_flag(argv, "--port") or 0))]
    if "llama-server" in program:
        return [Service("llama-server", host.name, _flag(argv, "--host") or host.address,
                        int(_flag(argv, "--port") or 0))]
    if "ggml-rpc-server" in program:
        return [Service("rpc", host.name, _flag(argv, "-H") or host.address, int(_flag(argv, "-p") or 0))]
    if argv[0].startswith("nginx: master process") and (listen := _nginx_listen(layout, host, argv[0].split())):
        return [Service("balancer", host.name, *listen)]
    return []


def targets(service: Service) -> list[dict]:
    """The probe's requests to one service (an RPC worker gets none: it has no authentication to test)."""
    base = f"http://{service.address}:{service.port}"
    if service.what in HTTP_ROUTES:
        return [{"kind": "http", "method": method, "url": base + path, "what": f"{service.what} {method} {path}"}
                for method, path in HTTP_ROUTES[service.what]]
    calls = GCS_CALLS if service.what == "gcs" else RAYLET_CALLS if service.what == "raylet" else []
    return [{"kind": "grpc", "url": f"{base}/{call}", "what": f"{service.what}@{service.host} {call}"}
            for call in calls]


@dataclass
class SecondUser:
    """Probes every server the run starts on `hosts` as `nobody`, from the first of `probers` that is another
    host than the server's, while the campaign runs."""

    probers: tuple[str, ...]                    # the testbed hosts the second user is on
    hosts: tuple[str, ...]                      # the hosts whose servers are probed
    probed: dict[str, object] = field(default_factory=dict)     # "<what> <route>" -> status
    seen: list[Service] = field(default_factory=list)
    controls: dict[str, object] = field(default_factory=dict)   # the GCS with the run's token, as root
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, layout) -> None:
        self._layout = layout
        self._thread = threading.Thread(target=self._watch, name="second-user", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=300)

    def _host(self, name: str):
        return next(host for host in self._layout.hosts if host.name == name)

    def _watch(self) -> None:
        done: set[Service] = set()
        while not self._stop.wait(1.0):
            try:
                for name in self.hosts:
                    for service in services_on(self._layout, self._host(name)):
                        if service not in done and service.port and self._answers(service):
                            done.add(service)
                            self.seen.append(service)
                            self._probe(service)
            except Exception as error:  # said by the test's assertion, never lost in the thread
                self.errors.append(f"{type(error).__name__}: {error}")

    def _prober(self, service: Service) -> str:
        return next(name for name in self.probers if name != service.host)

    def _answers(self, service: Service) -> bool:
        """Whether the service is up yet (asked from the prober's host, as root): an HTTP server's health
        answers 200, any other accepts a connection."""
        if service.what in HTTP_ROUTES:
            health = subprocess.run(self._enter(service, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                                "--max-time", "5", f"http://{service.address}:{service.port}/health"),
                                    capture_output=True, text=True, timeout=30)
            return health.stdout.strip() == "200"
        script = f"exec 3<>/dev/tcp/{service.address}/{service.port}"
        done = subprocess.run(self._enter(service, "bash", "-c", script), capture_output=True, timeout=30)
        return done.returncode == 0

    def _enter(self, service: Service, *argv: str) -> list[str]:
        """The command on the host that probes `service`, on CPU 1."""
        from servebench.devtools.testbed import enter_argv

        return [*enter_argv(self._layout, self._host(self._prober(service))), "taskset", "-c", "1", *argv]

    def _probe(self, service: Service) -> None:
        asked = targets(service)
        if asked:
            done = subprocess.run(self._enter(service, "runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
                                              PROBE, json.dumps(asked)), capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"the probe of {service} failed: {done.stderr[-500:]}")
            self.probed.update(dict(json.loads(done.stdout)))
        if service.what == "gcs" and service.token_path:
            self.controls[service.host] = self._with_token(service)

    def _with_token(self, service: Service) -> object:
        """GetAllNodeInfo with the run's token (read as root from the head's file), from the prober's host: the
        header goes through stdin into a private file of that host's own /tmp, never onto a command line."""
        token = on_cpu1(self._layout, self._host(service.host), f"cat {service.token_path}").strip()
        url = f"http://{service.address}:{service.port}/{GCS_CALLS[0]}"
        script = ('umask 077; h=$(mktemp -p /tmp); trap \'rm -f "$h"\' EXIT; cat > "$h"; '
                  "printf '\\0\\0\\0\\0\\0' | curl -sS --http2-prior-knowledge --max-time 20 -X POST "
                  "-H 'content-type: application/grpc' -H 'te: trailers' -H @\"$h\" --data-binary @- -D - "
                  f"-o /dev/null {url}")
        done = subprocess.run(self._enter(service, "sh", "-c", script),
                              input=f"authorization: Bearer {token}\n".encode(), capture_output=True, timeout=60)
        codes = [line.split(b":", 1)[1].strip() for line in done.stdout.splitlines()
                 if line.lower().startswith(b"grpc-status:")]
        if codes and int(codes[-1]) == 0:
            return 0
        return (f"{codes[-1].decode() if codes else 'no grpc-status'} with a token of {len(token)} characters from "
                f"{service.host}:{service.token_path}: {done.stdout[-300:]!r} {done.stderr[-300:]!r}")
