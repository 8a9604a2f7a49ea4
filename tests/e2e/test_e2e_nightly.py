"""Two nights through a real Prefect server: deploy prefect.yaml's smoke-nightly (and tests-nightly,
the file's other flow), trigger runs with `prefect deployment run`, let a real process worker
execute them, and find the regression planted in the second night (the engine's tokens four
times slower).

Asserts: both flow runs complete and land rows; the CLI reports the regression and
`--fail-on-regression` exits non-zero; the Prefect markdown artifact lists it; `compare`
calls the second run worse; the report's history chart marks the change; nothing is left
running (server, worker, engine) and no port stays open.

What it proves is the nightly machinery (the deployments, their trigger, the worker, detection
across nights, the report), not an engine: the nights serve the test-only echo engine (its
server is standard library only, up in a second; the worker's flow runs load it through
SERVEBENCH_PLUGINS), whose token delay is the planted change (2 ms, then 8 ms: output throughput
down by three quarters, as `--max-num-seqs 1` against four clients did on vLLM). vLLM's serving
is the other end-to-end tests' (test_e2e_campaign, test_e2e_load, test_workloads).
What it costs is the plumbing (the Prefect server, the deploy, the worker, a flow run's start-up
in a process of its own): the nights are as short as the detector allows (five repeats of twenty
requests, the fewest that let its U test reach p < 0.005 against one earlier night), and the
worker asks for work every second instead of every ten.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil

from servebench import warehouse
from servebench.paths import CHECKOUT
from servebench.processes import free_port, shm_entries
from tests.support.campaign_process import echo_campaign_dir
from tests.support.processes import engine_processes
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# One server on CPU 1 (the generator and Prefect on the other). Five repeats: the fewest with which
# the U test can reach p < 0.005 against a single earlier night (1/252 when every repeat of the
# second night is below every one of the first). Twenty requests each, the first four a warm-up.
NIGHT = """
name: e2e-nightly
provider: {{kind: local, nodes: [{{name: node0, cpus: "1"}}]}}
engine: {{kind: echo, token_delay_ms: {delay_ms}}}
model: {{path: model}}
modes: [{{name: tp1, tp: 1}}]
load: {{clients: [4], input_len: 32, output_len: 32, requests: 20, warmup: 4, repeats: 5}}
"""


def nights(tmp_path: Path) -> tuple[Path, Path]:
    """The two nights' campaign files: the same campaign (same series), the second with an engine
    setting that makes serving slower (each token 8 ms instead of 2)."""
    (tmp_path / "nights").mkdir()
    folder = echo_campaign_dir(tmp_path / "nights", {"first.yaml": NIGHT.format(delay_ms=2),
                                                     "second.yaml": NIGHT.format(delay_ms=8)})
    return folder / "first.yaml", folder / "second.yaml"


def prefect(env: dict, *args: str, timeout: float = 180) -> str:
    done = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def api(env: dict, method: str, path: str, body: dict | None = None):
    request = urllib.request.Request(env["PREFECT_API_URL"] + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """By PID: the process group, then anything of it that escaped."""
    if proc.poll() is None:
        family = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for child in family:
            if child.is_running():
                child.kill()


FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def finished_state(env: dict, flow_run_id: str) -> str | None:
    """The flow run's final state type, or None while it is still scheduled, pending or running."""
    state = api(env, "GET", f"/flow_runs/{flow_run_id}")["state"]["type"]
    return state if state in FINAL_STATES else None


def wait_for_run(env: dict, flow_run_id: str, timeout: float = 900) -> str:
    return wait_until(lambda: finished_state(env, flow_run_id), f"flow run {flow_run_id} to finish", timeout,
                      poll_s=1.0)


def answers_health(env: dict, server: subprocess.Popen, log: Path) -> bool:
    """Whether the Prefect server answers /health yet (failing at once if it exited)."""
    try:
        api(env, "GET", "/health")
        return True
    except OSError:
        assert server.poll() is None, log.read_text()
        return False


def trigger(env: dict, campaign: Path, db: Path) -> str:
    out = prefect(env, "deployment", "run", "campaign-run/smoke-nightly",
                  "--param", f"campaign_file={campaign}", "--param", f"warehouse_path={db}")
    return next(word for line in out.splitlines() if "UUID" in line for word in line.split() if len(word) == 36)


def test_two_nights_through_deployments_report_the_planted_regression(tmp_path):
    port = free_port()
    db = tmp_path / "nightly.duckdb"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL":
           f"http://127.0.0.1:{port}/api", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "SERVEBENCH_RUNS": str(tmp_path / "runs"), "PREFECT_LOGGING_LEVEL": "WARNING",
           # the worker's flow runs register the echo engine (tests.support.plugins) and build it here
           "SERVEBENCH_PLUGINS": "tests.support.plugins", "PYTHONPATH": str(CHECKOUT),
           "SERVEBENCH_CACHE": str(tmp_path / "cache"),
           # Prefect's worker keeps the flow's code in <TMPDIR>/runner_storage/<uuid>, left there when
           # the worker is stopped: the test's own temp dir (a run's scratch still goes to /tmp: short)
           "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    first_night, second_night = nights(tmp_path)
    env.pop("SERVEBENCH_WAREHOUSE", None)
    shm_before = shm_entries()
    server = start([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env,
                   tmp_path / "server.log")
    worker = None
    try:
        wait_until(lambda: answers_health(env, server, tmp_path / "server.log"), "the Prefect server to come up",
                   120, poll_s=0.5)
        prefect(env, "work-pool", "create", "servebench-local", "--type", "process")
        prefect(env, "work-queue", "create", "cluster-local", "--pool", "servebench-local", "--limit", "1")
        # started while the deployments are made (it polls the pool, which exists); it asks for scheduled
        # runs every second instead of every 10 s, so each night starts sooner
        worker = start([str(BIN / "prefect"), "worker", "start", "--pool", "servebench-local"],
                       {**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}, tmp_path / "worker.log")
        # one deployment of each flow (every entry of prefect.yaml has the same keys and one of these
        # entrypoints, and `servebench deployments serve` builds them all: tests/unit/test_deployments.py);
        # `--all`, what the README has a user run, deploys the other 28 the same way at 1.5 s each
        deployed = prefect(env, "--no-prompt", "deploy", "--name", "smoke-nightly", "--name", "tests-nightly")
        assert "smoke-nightly" in deployed and "tests-nightly" in deployed
        deployment = api(env, "GET", "/deployments/name/campaign-run/smoke-nightly")
        assert deployment["global_concurrency_limit"]["limit"] == 1
        schedules = deployment["schedules"]
        assert schedules[0]["schedule"]["cron"] == "0 2 * * *"
        assert schedules[0]["schedule"]["timezone"] == "Europe/Lisbon"

        first = trigger(env, first_night, db)
        assert wait_for_run(env, first) == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]
        second = trigger(env, second_night, db)
        assert wait_for_run(env, second) == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]

        artifacts = api(env, "POST", "/artifacts/filter", {"artifacts": {"key": {"any_": ["campaign-regressions"]}},
                                                           "sort": "CREATED_DESC"})
        newest = next(a for a in artifacts if a["flow_run_id"] == second)
        assert "## Regressions" in newest["data"] and "e2e-nightly/tp1 c4" in newest["data"], newest["data"]
    finally:
        if worker is not None:
            stop(worker)
        stop(server)

    con = warehouse.connect(db, read_only=True)
    runs = con.execute("select run_id, status from runs order by started_at").fetchall()
    regressions = con.execute("select metric, status, change from regressions where run_id = ? and kind = "
                              "'regression'", [runs[1][0]]).fetchall()
    rows = con.execute("select count(*) from requests").fetchone()[0]
    con.close()
    assert [s for _, s in runs] == ["completed", "completed"] and rows == 2 * 5 * 20
    assert "output_throughput" in {m for m, _, _ in regressions}, regressions

    cli = [str(BIN / "servebench")]
    listed = subprocess.run(cli + ["regressions", "--warehouse", str(db), "--fail-on-regression"],
                            capture_output=True, text=True, env=env)
    assert listed.returncode == 3, listed.stdout + listed.stderr
    assert "output_throughput" in listed.stdout and "regression" in listed.stdout
    assert subprocess.run(cli + ["regressions", "--warehouse", str(db)], capture_output=True, env=env).returncode == 0
    compared = subprocess.run(cli + ["compare", runs[0][0], runs[1][0], "--warehouse", str(db), "--format", "json"],
                              capture_output=True, text=True, env=env)
    verdicts = {(d["point"], d["metric"]): d["verdict"] for d in json.loads(compared.stdout)}
    assert verdicts[("tp1.c4", "output_throughput")] == "worse", verdicts
    report = (tmp_path / "runs" / runs[1][0] / "report.html").read_text()
    assert '"history"' in report and "first_bad_at" in report and "regression" in report

    assert engine_processes() == []
    assert shm_entries() - shm_before == set()
    leftovers = [c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert leftovers == []
    shutil.rmtree(tmp_path / "prefect-home", ignore_errors=True)
