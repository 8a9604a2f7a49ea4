"""The CLI as a user meets it: exit codes and messages."""

import json
import subprocess
import sys
from pathlib import Path

from servebench import warehouse

ROOT = Path(__file__).parents[1]


def servebench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def test_plan_prints_cells_and_server_commands():
    done = servebench("plan", "campaigns/smoke.yaml")
    assert done.returncode == 0, done.stderr
    assert "cell tp2.rate8.r0" in done.stdout
    assert "VLLM_CPU_OMP_THREADS_BIND='0|0'" in done.stdout  # oversubscribed: both ranks on the server core
    assert "--tensor-parallel-size 2" in done.stdout
    assert "taskset -c 0 " in done.stdout and "taskset -c 0,1" not in done.stdout
    assert "load generator: CPUs 1 of its own" in done.stdout


def test_plan_rejects_a_bad_file_with_exit_1_and_the_place():
    done = servebench("plan", "tests/campaigns/bad/unknown_mode_key.yaml")
    assert done.returncode == 1
    assert "unknown_mode_key.yaml:13: modes[1].tensor_parallel: unknown key" in done.stderr


def test_query_is_read_only_and_formats(tmp_path):
    path = tmp_path / "w.duckdb"
    con = warehouse.connect(path)
    con.execute("insert into builds (build_key, engine, engine_version, packages, python_version, platform, venv_path, "
                "pip_freeze, build_seconds, created_at) "
                "values ('k', 'vllm', '1', ['p'], '3.11', 'linux', '/v', '', 1.0, now())")
    con.close()
    done = servebench("query", "select build_key, engine from builds", "--format", "json", "--warehouse", str(path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"build_key": "k", "engine": "vllm"}]
    done = servebench("query", "select build_key from builds", "--format", "csv", "--warehouse", str(path))
    assert done.stdout.splitlines() == ["build_key", "k"]
    done = servebench("query", "delete from builds", "--warehouse", str(path))
    assert done.returncode == 1 and "read-only" in done.stderr


def test_query_on_a_missing_warehouse_says_so(tmp_path):
    done = servebench("query", "select 1", "--warehouse", str(tmp_path / "none.duckdb"))
    assert done.returncode == 1 and "no warehouse" in done.stderr


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line for line in ci.splitlines() if "pytest" in line and not line.startswith("#"))
    assert command in readme
