"""Resume's pure decisions and the claims lock, without a campaign: what a resume measures,
when it refuses, and a claim that waits for its holder and names it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from servebench.campaign.loading import parse_campaign
from servebench.campaign.resume import cells_to_run, resume_problem
from servebench.config.sweep import expand
from servebench.providers import claims
from tests.support.waiting import wait_until

CAMPAIGN = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: [0]}]}
model: {generate: tiny-llama}
modes: [{name: a}, {name: b, tp: 1}]
load: {clients: [1, 2], requests: 4}
"""


def test_resume_measures_cells_without_a_result_and_rerun_only_the_failed():
    cells = expand(parse_campaign(CAMPAIGN))
    keys = [cell.key for cell in cells]
    statuses = {keys[0]: "completed", keys[1]: "failed"}
    assert [c.key for c in cells_to_run(cells, statuses, failed_only=False)] == keys[2:]
    assert [c.key for c in cells_to_run(cells, statuses, failed_only=True)] == [keys[1]]


def test_a_finished_or_live_run_is_not_resumed_with_the_reason():
    assert resume_problem("r1", "running", False, orchestrator_alive=False) is None
    assert resume_problem("r1", "interrupted", False, orchestrator_alive=False) is None
    assert "resume --failed r1" in resume_problem("r1", "partial", False, orchestrator_alive=False)
    assert resume_problem("r1", "partial", True, orchestrator_alive=False) is None
    assert "still running" in resume_problem("r1", "running", False, orchestrator_alive=True)


def test_a_taken_claim_waits_for_its_holder_and_says_who_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv(claims.CLAIMS_VARIABLE, str(tmp_path))
    first = claims.hold(["this-host/cpu0", "this-host/cpu1"], {"run_id": "run-a"})
    said: list[str] = []
    got: dict = {}
    waiter = threading.Thread(target=lambda: got.setdefault("held", claims.hold(
        ["this-host/cpu1", "this-host/cpu2"], {"run_id": "run-b"}, say=said.append)))
    waiter.start()
    wait_until(lambda: said, "the second claim to say whom it waits for", timeout_s=10)
    assert "held" not in got and said and "this-host/cpu1" in said[0] and "run-a" in said[0], said
    first.release()
    waiter.join(timeout=10)
    assert "held" in got and len(said) == 1
    # run-a removed cpu1's file on release, under its lock: run-b, which waited on that file, took the path's new one
    cpu1 = tmp_path / claims._file_name("this-host/cpu1")
    assert "run-b" in cpu1.read_text() and sorted(tmp_path.iterdir()) == sorted(
        tmp_path / claims._file_name(f"this-host/cpu{n}") for n in (1, 2))
    got["held"].release()
    again = claims.hold(["this-host/cpu0", "this-host/cpu1", "this-host/cpu2"], {"run_id": "run-c"})
    again.release()
    assert list(tmp_path.iterdir()) == []  # nothing left in the claims directory once every run released


def test_a_killed_holders_claim_file_is_taken_and_removed_by_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setenv(claims.CLAIMS_VARIABLE, str(tmp_path))
    stale = tmp_path / claims._file_name("this-host/cpu0")
    stale.write_text('{"run_id": "killed"}\n')  # its holder died: the kernel dropped the lock, the file stayed
    held = claims.hold(["this-host/cpu0"], {"run_id": "next"}, say=lambda line: pytest.fail(line))
    assert "next" in stale.read_text()
    held.release()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["this-host/cpu0", "ssh/root@198.18.0.1:22/cpu3"])
def test_claim_files_are_readable_and_distinct(name):
    assert claims._file_name(name).startswith(name.replace("/", "_").replace("@", "_").replace(":", "_")[:20])
    assert claims._file_name(name) != claims._file_name(name + "0")


# The claims directory is shared with the host's other users: nothing planted there is followed or trusted.
OTHER_UID = 65534   # nobody: stands for another user of the host (the tests run as root, who may chown)


def test_a_symlink_planted_in_the_claims_directory_is_refused_and_its_target_kept(tmp_path, monkeypatch):
    directory, victim = tmp_path / "claims", tmp_path / "victim.txt"
    directory.mkdir(mode=0o1777)
    victim.write_text("the user's own file\n")
    (directory / claims._file_name("this-host/cpu0")).symlink_to(victim)
    monkeypatch.setenv(claims.CLAIMS_VARIABLE, str(directory))
    with pytest.raises(claims.ClaimsError, match="symbolic link .* refused, never followed"):
        claims.hold(["this-host/cpu0"], {"run_id": "r"})
    assert victim.read_text() == "the user's own file\n"
    (directory / claims._file_name("this-host/cpu1")).hardlink_to(victim)      # a second name of the same file
    with pytest.raises(claims.ClaimsError, match="not a plain file of one name"):
        claims.hold(["this-host/cpu1"], {"run_id": "r"})
    assert victim.read_text() == "the user's own file\n"


def test_a_claims_directory_another_user_owns_or_may_empty_is_refused(tmp_path, monkeypatch):
    directory = tmp_path / "claims"
    directory.mkdir(mode=0o755)
    os.chown(directory, OTHER_UID, OTHER_UID)
    monkeypatch.setenv(claims.CLAIMS_VARIABLE, str(directory))
    with pytest.raises(claims.ClaimsError, match=r"owned by user nobody, not by you or root.*SERVEBENCH_CLAIMS"):
        claims.hold(["this-host/cpu0"], {"run_id": "r"})
    os.chown(directory, 0, 0)
    os.chmod(directory, 0o777)                                   # writable by all, not sticky
    with pytest.raises(claims.ClaimsError, match="not sticky"):
        claims.hold(["this-host/cpu0"], {"run_id": "r"})
    link = tmp_path / "link"
    link.symlink_to(directory)
    monkeypatch.setenv(claims.CLAIMS_VARIABLE, str(link))
    with pytest.raises(claims.ClaimsError, match="not a directory of its own"):
        claims.hold(["this-host/cpu0"], {"run_id": "r"})


def test_another_users_stale_claim_is_held_by_its_lock_without_writing_it(tmp_path, monkeypatch):
    directory = tmp_path / "claims"
    directory.mkdir(mode=0o1777)
    stale = directory / claims._file_name("this-host/cpu0")
    stale.write_text('{"run_id": "theirs"}\n')
    os.chown(stale, OTHER_UID, OTHER_UID)
    os.chmod(stale, 0o644)
    monkeypatch.setenv(claims.CLAIMS_VARIABLE, str(directory))
    held = claims.hold(["this-host/cpu0"], {"run_id": "mine"})
    held.release()
    assert stale.read_text() == '{"run_id": "theirs"}\n'         # not ours to truncate, nor to remove


def test_the_default_claims_directory_is_shared_only_when_root_made_it_sticky(monkeypatch):
    monkeypatch.delenv(claims.CLAIMS_VARIABLE, raising=False)
    assert claims.claims_dir() == claims.SHARED_DIR              # root's runs: the host's shared, sticky directory
    monkeypatch.setattr(claims.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(claims, "SHARED_DIR", Path("/nonexistent/servebench-claims"))
    assert claims.claims_dir() == Path("/nonexistent/servebench-claims-1000")   # an ordinary user's own


def test_an_orchestrator_on_another_host_inside_a_slurm_job_is_alive_while_slurm_lists_its_job(tmp_path):
    import json

    from servebench.campaign.resume import ORCHESTRATOR_FILE, orchestrator_alive

    (tmp_path / ORCHESTRATOR_FILE).write_text(json.dumps({"pid": 1, "create_time": 0.0, "host": "node7",
                                                          "batch_job": "42"}))
    asked = []
    assert orchestrator_alive(tmp_path, lambda job: asked.append(job) or False) is False and asked == ["42"]
    assert orchestrator_alive(tmp_path, lambda job: True) is True
    assert orchestrator_alive(tmp_path) is True          # nobody can ask Slurm: only that host can tell
    (tmp_path / ORCHESTRATOR_FILE).write_text(json.dumps({"pid": 1, "create_time": 0.0, "host": "node7"}))
    assert orchestrator_alive(tmp_path, lambda job: False) is True   # not in a job: taken as alive
