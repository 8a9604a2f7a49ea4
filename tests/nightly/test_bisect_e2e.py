"""Bisect, end to end: a git repository made from the llama.cpp source with 9 commits, the
7th of which makes every decode step sleep 20 ms; `servebench bisect` (the real command: git, CMake
builds through the cache, llama-server, the load generator, DuckDB) names that commit within
ceil(log2(9)) + 1 builds. Then the same commits as a campaign's sweep axis: the good and the bad
commit side by side in one run, the bad one's answers gated against the good one's.

The repository's commits have fixed hashes, so the builds are found by key in the next run (a cold
first build of llama.cpp for this CPU takes minutes; every other commit recompiles one file, ccache)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servebench import warehouse
from servebench.paths import CHECKOUT, cache_dir
from tests.support.llamacpp_repo import SLOWDOWN_MS, make_repository
from tests.support.prefect_session import session_api_url

pytestmark = [pytest.mark.llamacpp, pytest.mark.nightly(reason=(
    "llama.cpp built at several commits and bisected; the test command keeps the bisection's search, "
    "verdicts and git builds (test_bisect)"))]
SLOW_AT = 6


def campaign(repo: Path, source: dict) -> dict:
    return {
        "name": "llamacpp-commits",
        "provider": {"kind": "local", "nodes": [{"name": "n0", "cpus": "0"}]},
        "engine": {"kind": "llamacpp", "source": {"git": str(repo), **source}},
        "model": {"generate": "tiny-llama", "seed": 0, "layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2,
                  "intermediate": 256, "vocab_size": 512, "max_position": 512},
        "modes": [{"name": "tp1", "executor": "local"}],
        "load": {"clients": [1], "input_len": 16, "output_len": 16, "requests": 6, "warmup": 1, "seed": 0,
                 "client": {"cpus": "1"}},
    }


def servebench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The real command, with the shared build cache (builds found by key across runs)."""
    env = os.environ | {"SERVEBENCH_RUNS": str(tmp_path / "runs"), "SERVEBENCH_CACHE": str(cache_dir()),
                        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                        "PREFECT_API_URL": session_api_url()}  # each bisect step a run: not a server of its own each
    return subprocess.run([sys.executable, "-m", "servebench", *args], env=env, cwd=CHECKOUT,
                          capture_output=True, text=True, timeout=2400)


def test_bisect_names_the_slowdown_commit_and_commits_run_side_by_side(tmp_path: Path):
    repo, hashes = make_repository(tmp_path, cache_dir(), commits=9, slow_at=SLOW_AT)
    wh = tmp_path / "w.duckdb"
    file = tmp_path / "commits.yaml"
    file.write_text(yaml.safe_dump(campaign(repo, {"commit": hashes[0]}), sort_keys=False))

    # the tiny model decodes a token in well under a millisecond, with scheduling jitter of tens of
    # percent between cells on any CPU: "bad" is three times slower, which the 20 ms sleep is many times over
    done = servebench(tmp_path, "bisect", str(file), "--good", hashes[0], "--bad", "main", "--metric", "tpot_p50_ms",
                      "--threshold", "2", "--repeats", "2", "--format", "json", "--warehouse", str(wh))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    assert outcome["first_bad"] == hashes[SLOW_AT], outcome
    assert outcome["subject"] == f"llama_context::decode: sleep {SLOWDOWN_MS} ms per step"
    assert outcome["last_good"] == hashes[SLOW_AT - 1]
    assert outcome["builds"] <= math.ceil(math.log2(len(hashes))) + 1, outcome

    con = warehouse.connect(wh, read_only=True)
    steps = con.execute("select step, commit_hash, verdict, value, change, run_id, build_key from bisect_steps "
                        "order by step").fetchall()
    builds = dict(con.execute("select build_key, source_digest from builds").fetchall())
    runs = con.execute("select count(*) from runs").fetchone()[0]
    con.close()
    assert len(steps) == outcome["builds"] == runs                          # every step is a run of its own
    assert steps[0][1:3] == (hashes[0], "baseline")
    for _, commit, verdict, value, change, _, key in steps[1:]:
        assert verdict == ("bad" if hashes.index(commit) >= SLOW_AT else "good"), steps
        assert builds[key] == commit                                        # each result traces to its commit
    slow = [value for _, _, verdict, value, *_ in steps if verdict == "bad"]
    assert slow and min(slow) > steps[0][3] + SLOWDOWN_MS / 2               # the sleep, not noise, was found

    # the good and the first bad commit as a sweep axis: one run, two builds found by key, gated
    file.write_text(yaml.safe_dump(campaign(repo, {"commits": [hashes[0], hashes[SLOW_AT]]}), sort_keys=False))
    done = servebench(tmp_path, "run", str(file), "--warehouse", str(wh))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    con = warehouse.connect(wh, read_only=True)
    run_id = con.execute("select run_id from runs where campaign = 'llamacpp-commits'").fetchone()[0]
    cells = dict(con.execute("select mode, median(tpot_p50_ms) from cells where run_id = ? and status = 'completed' "
                             "group by mode", [run_id]).fetchall())
    servers = dict(con.execute("select mode, correctness from servers where run_id = ?", [run_id]).fetchall())
    con.close()
    good, bad = f"tp1-{hashes[0][:8]}", f"tp1-{hashes[SLOW_AT][:8]}"
    assert set(cells) == {good, bad} and cells[bad] > cells[good] + SLOWDOWN_MS / 2, cells
    assert servers[good] == "reference" and servers[bad] in ("passed", "close"), servers
