"""The load generator's result file: written through its model, read back equal, an older file without a
version read as the current shape, a newer or unknown version refused naming the file, and the keys a
run leaves out left out of the file."""

import json
from pathlib import Path

import pytest

from servebench.load import LoadConfig, LoadResult, read_result, run_load_result
from servebench.load.result import RESULT_VERSION, ResultFileError, load_result, write_result
from servebench.telemetry.timebase import load_result_in_orchestrator_time
from tests.support.fake_openai_server import FakeServer

EXTRAS = {"ignore_eos": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def measured(**overrides) -> LoadResult:
    base = dict(model="m", clients=2, requests=4, input_len=5, output_len=4, vocab_size=100, timeout_s=5,
                request_extras=EXTRAS, token_counter="")
    with FakeServer() as server:
        return run_load_result(LoadConfig(base_url=server.url, **{**base, **overrides}))


@pytest.fixture(scope="module")
def result() -> LoadResult:
    return measured()


def test_a_result_written_reads_back_equal_and_its_file_is_its_json_form(result: LoadResult, tmp_path: Path):
    path = tmp_path / "cells" / "c.json"
    write_result(result, path)
    assert read_result(path) == result
    on_disk = json.loads(path.read_text())
    assert on_disk == result.model_dump(mode="json") == load_result(path)
    assert on_disk["version"] == RESULT_VERSION and set(on_disk) == {"version", "config", "t0", "summary", "requests"}
    assert on_disk["requests"][0] == result.requests[0].to_dict()
    assert on_disk["t0"]["wall"] == result.t0.wall.isoformat()   # Python's ISO form, "+00:00"


def test_the_json_form_written_back_is_the_same_file(result: LoadResult, tmp_path: Path):
    """What readers of dicts hand back to `write_result` (a client node's result moved onto our clocks)."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write_result(result, first)
    write_result(load_result(first), second)
    assert first.read_text() == second.read_text()


def test_keys_a_run_leaves_out_stay_out_and_a_key_set_to_none_stays_null(tmp_path: Path):
    plain = measured().model_dump(mode="json")["summary"]
    for absent in ("hung", "turns", "workload", "warm_until_steady", "counter_check", "prefix_cache_hit_rate",
                   "prompt_cache_tokens"):
        assert absent not in plain
    assert "node" not in plain["client"] and plain["server_output_tokens"] is None   # always there, null here
    counted = measured(prefix_cache_counters="queries,hits")   # the fake server has no /metrics: unknown
    path = tmp_path / "r.json"
    write_result(counted, path)
    summary = json.loads(path.read_text())["summary"]
    assert "prefix_cache_hit_rate" in summary and summary["prefix_cache_hit_rate"] is None
    assert "prefix_cache_hit_rate" in read_result(path).summary.model_fields_set


def test_a_file_from_before_the_version_key_reads_as_the_current_shape(result: LoadResult, tmp_path: Path):
    data = result.model_dump(mode="json")
    del data["version"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    read = read_result(path)
    assert read.version == RESULT_VERSION and read == result


@pytest.mark.parametrize("version, says", [(RESULT_VERSION + 1, f"version {RESULT_VERSION + 1}, newer than"),
                                           ("one", "unknown version 'one'"), (0, "unknown version 0")])
def test_a_file_of_another_version_is_refused_naming_the_file(result: LoadResult, tmp_path: Path, version, says):
    path = tmp_path / "cells" / "tp1.c2.r0.json"
    path.parent.mkdir()
    path.write_text(json.dumps(result.model_dump(mode="json") | {"version": version}))
    with pytest.raises(ResultFileError) as refused:
        read_result(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: a load result of ") and says in message, message
    with pytest.raises(ResultFileError):
        load_result(path)


def test_a_file_that_is_no_result_is_refused_naming_the_file_and_the_key(result: LoadResult, tmp_path: Path):
    path = tmp_path / "r.json"
    data = result.model_dump(mode="json")
    del data["summary"]["completed"]
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=r"r\.json: not a load result of version 1: summary\.completed: "):
        read_result(path)
    path.write_text('{"version": 1, "config"')   # cut short
    with pytest.raises(ResultFileError, match=r"r\.json: not a load result"):
        read_result(path)


def test_a_client_nodes_result_moved_onto_our_clocks_keeps_its_added_keys(result: LoadResult, tmp_path: Path):
    moved = load_result_in_orchestrator_time(result.model_dump(mode="json"), offset_s=2.0, mono_minus_wall=-5.0)
    moved["summary"].setdefault("client", {})["node"] = "h3"
    path = tmp_path / "r.json"
    write_result(moved, path)
    read = read_result(path)
    assert read.summary.client is not None and read.summary.client.node == "h3"
    assert read.t0.clock_offset_s == 2.0 and read.t0.wall_node == result.t0.wall
    assert json.loads(path.read_text())["t0"] == moved["t0"]


def test_a_recorded_trace_config_reads_after_its_trace_is_gone(tmp_path: Path):
    """A result's config says what ran: reading it does not read the trace again."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 6, "output_length": 2, "hash_ids": []})
                             + "\n" for t in (0, 20, 40)))
    ran = measured(clients=None, requests=None, workload={"kind": "trace", "format": "mooncake", "path": str(trace)})
    path = tmp_path / "r.json"
    write_result(ran, path)
    trace.unlink()
    read = read_result(path)
    assert read.config.workload is not None and read.config.workload.kind == "trace"
    assert read.model_dump(mode="json") == ran.model_dump(mode="json")
    assert read.summary.workload is not None and read.summary.workload.name == "trace"


WINDOW_KEYS = {"requests", "completed", "failed", "duration_s", "offered_rate", "scheduled_rate", "achieved_rate",
               "request_throughput", "output_throughput", "total_token_throughput", "goodput", "slos",
               "total_input_tokens", "total_output_tokens", "ttft_ms", "ttft_from_scheduled_ms", "ttft_text_ms",
               "tpot_ms", "itl_ms", "e2el_ms", "schedule_lag_ms", "errors"}


def test_the_summary_has_the_keys_its_readers_index(result: LoadResult):
    """The warehouse's landing, the campaign's verdict and the CLI read these by name."""
    summary = result.model_dump(mode="json")["summary"]
    assert set(summary) == WINDOW_KEYS | {"warmup_requests", "whole_run", "percentile_estimator", "client", "valid",
                                          "invalid_reasons", "prompt_token_mismatches", "server_output_tokens",
                                          "client_output_tokens"}
    assert set(summary["whole_run"]) == WINDOW_KEYS
    assert set(summary["ttft_ms"]) == {"count", "mean", "p50", "p90", "p95", "p99", "p999"}
    assert set(summary["client"]) == {"cpu_seconds", "wall_seconds", "core_fraction", "cpus", "nice", "notes",
                                      "idle_poll_cpus", "idle_poll_off"}
