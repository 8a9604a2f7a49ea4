"""The CLI as a user meets it: exit codes and messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.warehouse import landing

ROOT = Path(__file__).parents[2]


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


# What a new user meets when a command line or a file is wrong: the command's own usage, the closest
# name, one line for a file or a value whose content is wrong.

def test_an_unknown_flag_after_a_command_shows_that_commands_usage():
    done = servebench("query", "--fmt", "csv", "select 1")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: servebench query ")
    assert "servebench query: error: unrecognized arguments: --fmt" in done.stderr
    assert "saturation" not in done.stderr  # not the top-level usage listing every command


def test_a_mistyped_command_is_answered_with_the_closest():
    done = servebench("qeury", "select 1")
    assert done.returncode == 2 and "unknown command 'qeury': did you mean query?" in done.stderr


def test_a_mistyped_campaign_name_is_answered_with_the_closest_shipped_one():
    done = servebench("plan", "smok")
    assert done.returncode == 1
    assert done.stderr.strip() == "servebench: no campaign 'smok': did you mean smoke?"


def test_an_unknown_campaign_key_is_answered_with_the_closest_field_of_its_block(tmp_path):
    file = tmp_path / "typo.yaml"
    file.write_text((ROOT / "campaigns" / "smoke.yaml").read_text().replace("  input_len: 64", "  input_length: 64"))
    done = servebench("plan", str(file))
    assert done.returncode == 1
    assert "load.input_length: unknown key; did you mean input_len" in done.stderr


def test_yaml_syntax_errors_name_the_campaign_file_and_the_workload_file(tmp_path):
    campaign = tmp_path / "broken.yaml"
    campaign.write_text("name: x\nmodes: [\n  - name: a\n")
    done = servebench("plan", str(campaign))
    assert done.returncode == 1 and f'in "{campaign}", line 3' in done.stderr, done.stderr
    workload = tmp_path / "workload.yaml"
    workload.write_text("kind: synthetic\ninput: [\n")
    done = servebench("load", "--base-url", "http://127.0.0.1:9", "--model", "m", "--requests", "1", "--clients", "1",
                      "--workload", str(workload))
    assert done.returncode == 2 and f'in "{workload}", line 3' in done.stderr, done.stderr
    assert "<unicode string>" not in done.stderr


def test_a_bad_workload_is_one_line_without_the_usage():
    done = servebench("load", "--base-url", "http://127.0.0.1:9", "--model", "m", "--requests", "1", "--clients", "1",
                      "--workload", "{kind: bogus}")
    assert done.returncode == 2
    assert done.stderr.startswith("servebench load: --workload: ") and "'bogus'" in done.stderr
    assert "usage:" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_format_json_is_the_one_output_option(tmp_path):
    env = {**os.environ, "SERVEBENCH_CACHE": str(tmp_path)}
    done = servebench("builds", "list", "--format", "json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
    assert servebench("builds", "list", "--json", env=env).returncode == 2


def test_runs_beside_warehouse_sets_where_run_directories_go(tmp_path, monkeypatch):
    from servebench.cli import main
    from servebench.paths import runs_dir

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "from-the-environment"))  # restored after the test
    db = tmp_path / "w.duckdb"
    warehouse.connect(db).close()
    assert main(["resume", "no-such-run", "--warehouse", str(db), "--runs", str(tmp_path / "runs")]) == 1
    assert runs_dir() == tmp_path / "runs"
    with pytest.raises(SystemExit):           # a command that only reads has no --runs: it makes no run directory
        main(["query", "select 1", "--warehouse", str(db), "--runs", str(tmp_path / "runs")])


def test_report_of_a_misspelt_campaign_names_the_campaigns_with_runs(tmp_path):
    from tests.support.synthetic_runs import synthetic_warehouse

    db = tmp_path / "w.duckdb"
    synthetic_warehouse(db, tmp_path)
    done = servebench("report", "--campaign", "synthtic", "--warehouse", str(db))
    assert done.returncode == 1
    assert done.stderr.strip() == ("servebench: no run of campaign 'synthtic': did you mean synthetic? "
                                   "(campaigns with runs: synthetic)")


def test_ctrl_c_during_a_build_exits_130_naming_the_build_not_with_a_traceback(tmp_path):
    import signal
    import time

    def as_a_shells_background_job() -> None:  # `servebench build x.yaml &` in a script: SIGINT arrives ignored
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    env = {**os.environ, "SERVEBENCH_CACHE": str(tmp_path / "cache")}  # empty: the build has to start
    proc = subprocess.Popen([sys.executable, "-m", "servebench", "build", "campaigns/smoke.yaml"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=as_a_shells_background_job)
    try:
        deadline = time.monotonic() + 120
        assert proc.stderr is not None
        while "engine build" not in proc.stderr.readline():  # the build is under way
            assert proc.poll() is None and time.monotonic() < deadline, "the build did not start"
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "servebench build: interrupted while building vllm" in err and "Traceback" not in err, err


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    done = servebench("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"servebench {version('servebench-campaigns')}"


def test_runs_lists_every_run_newest_first_with_cells_valid_of_all(tmp_path):
    from tests.support.synthetic_runs import synthetic_warehouse

    db = tmp_path / "w.duckdb"
    synthetic_warehouse(db, tmp_path)
    con = warehouse.connect(db)
    landing.insert_run(con, "r2", landing.RunRecord(
        campaign="synthetic", spec_hash="h", spec_text="", spec_normalized={}, campaign_file="synthetic.yaml",
        run_dir=tmp_path))     # started last, still in progress
    con.close()
    done = servebench("runs", "--warehouse", str(db))
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split() == ["run", "campaign", "started", "(UTC)", "status", "took", "cells", "valid"]
    assert [line.split()[0] for line in lines] == ["r2", "r1", "r0"]
    assert lines[0].split()[4:] == ["running", "-", "0", "of", "0"]
    assert lines[1].split()[1] == "synthetic" and lines[1].split()[4] == "completed"
    assert lines[1].split()[-3:] == ["50", "of", "50"]
    listed = json.loads(servebench("runs", "--warehouse", str(db), "--format", "json", "--campaign", "none").stdout)
    assert listed == []
    # the latest run of a report is the latest that has ended, not the one still landing
    done = servebench("report", "--campaign", "synthetic", "--warehouse", str(db), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    title = (tmp_path / "out" / "report.html").read_text().split("<title>")[1].split("</title>")[0]
    assert "r1" in title and "r2" not in title, title


def test_runs_of_an_empty_warehouse_says_so(tmp_path):
    db = tmp_path / "w.duckdb"
    warehouse.connect(db).close()
    done = servebench("runs", "--warehouse", str(db))
    assert done.returncode == 1 and "no run in" in done.stderr
