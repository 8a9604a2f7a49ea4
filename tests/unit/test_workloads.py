"""Workloads: length distributions, datasets, shared prefixes and trace replay.

Pure parts are tested directly; what is sent is read back from a real loopback server (the
test server of tests/support), never from the generator's own bookkeeping.
"""

from __future__ import annotations

import json
import random
import statistics

import pytest

from servebench.load import LoadConfig, run_load
from servebench.load.distributions import LengthSpec, WorkloadError, read_empirical
from servebench.load.traces import in_window, read_trace, replay_offsets
from servebench.load.workload import Workload
from servebench.load.workload_spec import parse_workload_option, workload_from_data
from tests.support.fake_openai_server import FakeServer

N = 4000  # draws per distribution: the sample mean is then within 4 standard errors with near certainty


def draws(spec: dict, n: int = N, seed: int = 7) -> list[int]:
    length = LengthSpec(**spec)
    rng = random.Random(seed)
    return [length.sample(rng) for _ in range(n)]


@pytest.mark.parametrize("spec", [
    {"dist": "normal", "mean": 200, "stdev": 40, "min": 1, "max": 10_000},
    {"dist": "lognormal", "mean": 256, "stdev": 128, "min": 1, "max": 100_000},
])
def test_normal_and_lognormal_lengths_have_the_specified_mean_and_spread(spec):
    values = draws(spec)
    standard_error = spec["stdev"] / N ** 0.5
    assert abs(statistics.fmean(values) - spec["mean"]) < 4 * standard_error
    assert statistics.stdev(values) == pytest.approx(spec["stdev"], rel=0.1)


def test_uniform_fixed_and_clamped_lengths_stay_in_their_bounds():
    uniform = draws({"dist": "uniform", "min": 10, "max": 20})
    assert min(uniform) == 10 and max(uniform) == 20
    assert abs(statistics.fmean(uniform) - 15) < 4 * (11 ** 2 / 12) ** 0.5 / N ** 0.5
    assert set(draws({"dist": "fixed", "value": 64}, n=10)) == {64}
    clamped = draws({"dist": "normal", "mean": 100, "stdev": 50, "min": 90, "max": 110})
    assert min(clamped) == 90 and max(clamped) == 110


def test_empirical_lengths_follow_the_file_weights(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("# length weight\n100 3\n200,1\n\n")
    assert read_empirical(path) == ([100, 200], [3.0, 1.0])
    values = draws({"dist": "empirical", "file": str(path)})
    assert set(values) == {100, 200}
    assert values.count(100) / N == pytest.approx(0.75, abs=4 * (0.75 * 0.25 / N) ** 0.5)


def workload(spec: dict, seed: int = 0, **kwargs) -> Workload:
    return Workload(endpoint="completions", input_len=8, output_len=4, vocab_size=1000, data_seed=seed,
                    spec=workload_from_data(spec), **kwargs)


SYNTHETIC = {"kind": "synthetic", "input": {"dist": "uniform", "min": 5, "max": 50},
             "output": {"dist": "lognormal", "mean": 20, "stdev": 5, "max": 60}}
PREFIX = {"kind": "shared-prefix", "groups": 2, "prefix_len": 16, "suffix_len": 4}


@pytest.mark.parametrize("spec", [SYNTHETIC, PREFIX])
def test_the_same_seed_makes_the_same_requests_and_another_seed_others(spec):
    first = [workload(spec).item(i) for i in range(20)]
    assert first == [workload(spec).item(i) for i in range(20)]
    assert first != [workload(spec, seed=1).item(i) for i in range(20)]
    assert all(len(item.prompt) == item.expected_input_tokens for item in first)


def test_shared_prefix_groups_share_exactly_their_prefix_interleaved_or_bursty():
    items = [workload(PREFIX).item(i) for i in range(6)]
    assert [item.group for item in items] == [0, 1, 0, 1, 0, 1]
    assert items[0].prompt[:16] == items[2].prompt[:16] != items[1].prompt[:16]
    assert items[0].prompt[16:] != items[2].prompt[16:] and len(items[0].prompt) == 20
    bursty = [workload({**PREFIX, "order": "bursty", "burst": 3}).item(i).group for i in range(8)]
    assert bursty == [0, 0, 0, 1, 1, 1, 0, 0]


def mooncake(tmp_path, rows: list[dict]):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_trace_offsets_are_scaled_windowed_and_rescaled_to_a_rate(tmp_path):
    path = mooncake(tmp_path, [{"timestamp": t, "input_length": 10, "output_length": 2, "hash_ids": []}
                               for t in (1000, 1500, 2000, 4000, 9000)])
    rows = read_trace(path, "mooncake")
    assert replay_offsets(rows, time_scale=0.1) == pytest.approx([0.0, 0.05, 0.1, 0.3, 0.8])
    window = in_window(rows, start_s=0.5, duration_s=3.0, max_requests=None)
    assert [r.time_s for r in window] == pytest.approx([0.0, 0.5, 2.5])
    assert len(in_window(rows, 0.0, None, max_requests=2)) == 2
    at_rate = replay_offsets(rows, rate=2.0)
    assert (len(at_rate) - 1) / at_rate[-1] == pytest.approx(2.0)


def test_mooncake_replay_sends_shared_hash_ids_as_identical_tokens_on_the_scaled_schedule(tmp_path):
    """200 generated requests at 10x: the sent token ids share exactly the blocks their hash ids
    share, and every request was scheduled at its scaled timestamp and not sent before it."""
    rng = random.Random(3)
    rows, stamp = [], 0
    for index in range(200):
        stamp += rng.randint(0, 200)  # ms: about 10 req/s, 100 at 10x
        blocks = rng.randint(1, 3)
        rows.append({"timestamp": stamp, "input_length": 8 * blocks - rng.randint(0, 7),
                     "output_length": index + 1,  # tells the sent bodies apart
                     "hash_ids": [rng.randint(0, 5) for _ in range(blocks)]})
    path = mooncake(tmp_path, rows)
    spec = {"kind": "trace", "format": "mooncake", "path": str(path), "time_scale": 0.1, "block_size": 8}
    with FakeServer() as server:
        result = run_load(LoadConfig(base_url=server.url, model="m", workload=spec, vocab_size=1000, timeout_s=5))
        sent = {body["max_tokens"]: body["prompt"] for body in server.requests}
    summary = result["summary"]
    assert summary["completed"] == 200 and len(sent) == 200
    first = rows[0]["timestamp"]
    assert summary["offered_rate"] == pytest.approx(199 / ((stamp - first) / 1000 * 0.1))
    scheduled = [r["scheduled_s"] for r in result["requests"]]
    assert scheduled == pytest.approx([(r["timestamp"] - first) / 1000 * 0.1 for r in rows], abs=1e-6)
    # how far behind a loaded machine sends is the validity check's to judge; never before its time
    assert all(r["sent_s"] >= r["scheduled_s"] for r in result["requests"])
    blocks: dict[int, list[int]] = {}   # hash id -> its tokens, from the longest use seen
    for row in rows:
        prompt = sent[row["output_length"]]
        assert len(prompt) == row["input_length"]
        for i, hash_id in enumerate(row["hash_ids"]):
            block = prompt[8 * i:8 * i + 8]
            known = blocks.setdefault(hash_id, block)
            shorter, longer = sorted((known, block), key=len)
            assert longer[:len(shorter)] == shorter, f"hash id {hash_id} sent as two different blocks"
            blocks[hash_id] = longer
    assert len({tuple(b) for b in blocks.values()}) == len(blocks) == 6


def test_dataset_jsonl_takes_text_prompts_and_token_ids(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "hello there", "output_len": 5}\n{"prompt_ids": [7, 8, 9]}\n')
    items = workload({"kind": "dataset", "format": "jsonl", "path": str(path)}).pool
    assert sorted((str(i.prompt), i.output_len, i.expected_input_tokens) for i in items) == \
        [("[7, 8, 9]", 4, 3), ("hello there", 5, None)]


def word_tokenizer(tmp_path) -> str:
    """A tokenizer of one token a word: the counts a test expects are the words it wrote."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>", *"alpha beta gamma delta node core cache".split()]
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return str(tmp_path)  # the model directory


def test_sharegpt_dataset_counts_with_the_model_tokenizer(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "alpha beta gamma"},
                                                   {"from": "gpt", "value": "delta node core cache"}]},
                                {"conversations": [{"from": "human", "value": "a question, no reply"}]}]))
    items = workload({"kind": "dataset", "format": "sharegpt", "path": str(path)},
                     tokenizer=word_tokenizer(tmp_path)).pool
    assert [(i.prompt, i.expected_input_tokens, i.output_len) for i in items] == [("alpha beta gamma", 3, 4)]


# Bad input: refused before anything is sent, naming the file and line or the field.

def test_a_malformed_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": oops}\n')
    with pytest.raises(WorkloadError, match=r"data.jsonl:2: not JSON"):
        workload_from_data({"kind": "dataset", "format": "jsonl", "path": str(path)})


def test_a_trace_whose_timestamps_go_backwards_names_the_line(tmp_path):
    path = mooncake(tmp_path, [{"timestamp": 0, "input_length": 5, "output_length": 1},
                               {"timestamp": 50, "input_length": 5, "output_length": 1},
                               {"timestamp": 20, "input_length": 5, "output_length": 1}])
    with pytest.raises(WorkloadError, match=r"trace.jsonl:3: timestamp 20 ms is earlier than line 2's"):
        workload_from_data({"kind": "trace", "format": "mooncake", "path": str(path)})
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n"
                     "2023-11-16 18:15:46.1000000,10,2\n")
    with pytest.raises(WorkloadError, match=r"azure.csv:3: timestamp .* earlier than line 2's"):
        workload_from_data({"kind": "trace", "format": "azure", "path": str(azure)})


def test_a_length_whose_min_exceeds_its_max_names_the_field():
    with pytest.raises(WorkloadError, match=r"--workload: input: min \(50\) exceeds max \(10\)"):
        parse_workload_option("{kind: synthetic, input: {dist: uniform, min: 50, max: 10}}")


def test_a_prompt_longer_than_the_context_is_refused(tmp_path):
    with pytest.raises(WorkloadError, match=r"workload: prompts up to 50 and answers up to 60 tokens exceed "
                                            r"the model's context of 100"):
        workload(SYNTHETIC, max_context=100)
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt_ids": [5, 6]}\n{"prompt_ids": [5, 6, 7, 8, 9, 10, 11, 12], "output_len": 3}\n')
    with pytest.raises(WorkloadError, match=r"data.jsonl:2: 8 prompt \+ 3 answer tokens exceed the model's context "
                                            r"of 10"):
        workload({"kind": "dataset", "format": "jsonl", "path": str(path)}, max_context=10)


@pytest.mark.parametrize("fmt, text", [("jsonl", "\n\n"), ("sharegpt", "[]")])
def test_an_empty_dataset_is_refused(tmp_path, fmt, text):
    path = tmp_path / "empty.data"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=r"empty.data: no .*an empty dataset"):
        workload_from_data({"kind": "dataset", "format": fmt, "path": str(path)})


def test_the_workload_flag_round_trips_through_the_cli_and_names_the_field(tmp_path, capsys):
    from servebench.cli import build_parser
    from servebench.cli.load import config_from_args
    from servebench.load.config import to_argv

    original = LoadConfig(base_url="http://h:1", model="m", clients=2, requests=10, token_counter=None,
                          workload=PREFIX)
    args = build_parser().parse_args(["load", *to_argv(original)])
    assert config_from_args(args) == original
    spec_file = tmp_path / "w.yaml"
    spec_file.write_text("kind: synthetic\ninput: {dist: normal, mean: 10}\n")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["load", "--base-url", "http://h:1", "--model", "m", "--clients", "1",
                                   "--requests", "1", "--workload", str(spec_file)])
    assert "w.yaml: input: dist normal needs stdev" in capsys.readouterr().err


# The campaign's `load.workload` block: a sweep axis, part of each cell's key and series identity.

CAMPAIGN = """
name: w
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}
model: {generate: tiny-llama, max_position: 512}
modes: [{name: tp1}]
load:
  clients: [1, 2]
  requests: 4
  workload:
"""


def campaign_file(tmp_path, workload: str, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(CAMPAIGN + "".join(f"    {line}\n" for line in workload.strip().splitlines()))
    return path


def test_workloads_are_a_sweep_axis_with_their_names_in_cell_keys(tmp_path):
    from servebench.campaign.loading import load_campaign
    from servebench.config.sweep import expand

    mooncake(tmp_path, [{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1]},
                        {"timestamp": 400, "input_length": 50, "output_length": 4, "hash_ids": [1, 2]}])
    path = campaign_file(tmp_path, """
- {kind: synthetic, input: {dist: lognormal, mean: 100, stdev: 30, max: 300}}
- {kind: shared-prefix, groups: 2, prefix_len: 256}
- {kind: trace, format: mooncake, path: trace.jsonl, time_scale: 0.1}
- {kind: sessions, sessions: 4, turns: 3}
""")
    campaign = load_campaign(path, host_cpus={0, 1})
    cells = expand(campaign)
    assert [c.key for c in cells] == ["tp1.synthetic.c1.r0", "tp1.synthetic.c2.r0", "tp1.prefix.c1.r0",
                                      "tp1.prefix.c2.r0", "tp1.trace.rate25.r0",  # the trace at its own 10x rate
                                      "tp1.sessions.c1.r0", "tp1.sessions.c2.r0"]
    assert cells[4].workload.path == str(tmp_path / "trace.jsonl")  # relative to the campaign file
    assert cells[0].workload.identity() != cells[2].workload.identity()


@pytest.mark.parametrize("workload, message", [
    ("{kind: synthetic, input: {dist: uniform, min: 90, max: 10}}",
     r"c.yaml:10: load.workload.input: min \(90\) exceeds max \(10\)"),
    ("{kind: shared-prefix, groups: 2, prefix_len: 500}",
     r"load.workload\[0\] \(prefix\): prompts up to 516 and answers up to 32 tokens exceed the model's context"),
    ("{kind: trace, format: mooncake, path: trace.jsonl}",
     r"c.yaml:9: load.workload: .*trace.jsonl:2: timestamp 0 ms is earlier than line 1's"),
    ("{kind: dataset, format: jsonl, path: trace.jsonl}",
     r"c.yaml:9: load.workload: .*trace.jsonl: no prompts \(an empty dataset\)"),
])
def test_a_bad_workload_block_names_the_campaign_file_line_and_field(tmp_path, workload, message):
    from servebench.campaign.loading import SpecError, load_campaign

    if "trace" in workload:
        mooncake(tmp_path, [{"timestamp": 10, "input_length": 5, "output_length": 1},
                            {"timestamp": 0, "input_length": 5, "output_length": 1}])
    if "dataset" in workload:
        (tmp_path / "trace.jsonl").write_text("")
    with pytest.raises(SpecError, match=message):
        load_campaign(campaign_file(tmp_path, workload), host_cpus={0, 1})


REQUEST_COLUMNS = ("expected_input_tokens, input_tokens, requested_output_tokens, output_tokens, prefix_group, "
                   "session, turn")


def land_first_cell(tmp_path, workload: str, server: FakeServer | None = None,
                    cell_columns: str = "workload_name, workload", request_columns: str = REQUEST_COLUMNS,
                    **load) -> tuple:
    """The campaign's first cell measured against the test server (`server`, else one that answers) with
    more `load` fields, and landed: (its cells row's `cell_columns`, its request rows' `request_columns`)."""
    from servebench import warehouse
    from servebench.campaign.loading import parse_campaign
    from servebench.config.sweep import cell_workload_config, expand
    from servebench.warehouse import landing

    text = CAMPAIGN + f"    {workload}\n"
    campaign = parse_campaign(text, host_cpus={0, 1})
    cell = expand(campaign)[0]
    with server or FakeServer() as running:
        result = run_load(LoadConfig(base_url=running.url, model="m", clients=cell.point.clients,
                                     requests=campaign.load.requests, vocab_size=100, seed=cell.seed,
                                     **cell_workload_config(campaign, cell), **load))
    con = warehouse.connect(tmp_path / "w.duckdb")
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="w", spec_hash=campaign.spec_hash(), spec_text=text, spec_normalized=campaign.normalized(),
        campaign_file="w.yaml", run_dir=tmp_path))
    cid = landing.land_cell(con, "r1", landing.CellRecord(cell=cell, input_len=0, output_len=0, status="completed",
                            measured=landing.CellMeasurement(result=result)))
    landed = con.execute(f"select {cell_columns} from cells where cell_id = ?", [cid]).fetchone()
    rows = con.execute(f"select {request_columns} from requests where cell_id = ? order by request_index",
                       [cid]).fetchall()
    con.close()
    return landed, rows


def test_a_workload_cell_lands_its_workload_and_per_request_lengths(tmp_path):
    (name, identity), rows = land_first_cell(tmp_path, "{kind: shared-prefix, groups: 2, prefix_len: 16, "
                                                       "suffix_len: 4}")
    assert name == "prefix" and json.loads(identity)["prefix_len"] == 16
    assert rows == [(20, 20, 32, 32, group, None, None) for group in (0, 1, 0, 1)]


def test_a_sessions_cell_lands_each_turn(tmp_path):
    (name, _), rows = land_first_cell(tmp_path, "{kind: sessions, sessions: 2, turns: 2, first_input: 8, "
                                                "turn_input: 4, output: 4}")
    assert name == "sessions"
    assert rows == [(8, 8, 4, 4, None, 0, 0), (16, 16, 4, 4, None, 0, 1),
                    (8, 8, 4, 4, None, 1, 0), (16, 16, 4, 4, None, 1, 1)]


def test_a_cell_whose_responses_say_their_cached_prompt_tokens_lands_them_and_its_hit_rate(tmp_path):
    """A shared-prefix cell against a server replaying llama.cpp's recorded answer to a prefix hit (256 of
    272 prompt tokens cached): each request row holds both counts, the cell its hit rate."""
    from pathlib import Path

    from servebench.engines import get_engine

    recorded = Path(__file__).parents[1] / "data" / "llamacpp_streams" / "completions_prefix_hit.sse"
    (rate,), rows = land_first_cell(
        tmp_path, "{kind: shared-prefix, groups: 2, prefix_len: 256, suffix_len: 16}",
        FakeServer("replay", recorded=recorded.read_bytes()), cell_columns="prefix_cache_hit_rate",
        request_columns="input_tokens, cached_input_tokens, processed_input_tokens",
        prompt_cache_tokens=get_engine("llamacpp").api.prompt_cache_tokens)
    assert rows == [(272, 256, 16)] * 4 and rate == round(256 / 272, 4)


@pytest.mark.parametrize("kind", ["vllm", "llamacpp"])
def test_a_campaign_cell_reads_the_prefix_cache_where_its_engine_says(kind):
    """A cell's load config carries its engine's declarations: vLLM's /metrics counters, llama.cpp's paths
    to the cached and processed prompt tokens of each answer."""
    from servebench.campaign.load_config import LoadTarget, cell_load_config
    from servebench.campaign.loading import parse_campaign
    from servebench.config.sweep import expand
    from servebench.engines import get_engine
    from servebench.planning.placement import ClientPlacement

    text = CAMPAIGN.replace("modes: [{name: tp1}]", f"engine: {{kind: {kind}}}\nmodes: [{{name: m}}]")
    campaign = parse_campaign(text + "    {kind: shared-prefix, groups: 2, prefix_len: 64}\n", host_cpus={0, 1})
    engine = get_engine(kind)
    config = cell_load_config(campaign, expand(campaign)[0], LoadTarget("http://127.0.0.1:9", "tiny"), 512,
                              ClientPlacement(None, "shared"), engine)
    declared = (engine.api.prefix_cache_metrics, engine.api.prompt_cache_tokens)
    assert (config.prefix_cache_counters, config.prompt_cache_tokens) == tuple(
        list(paths) if paths else None for paths in declared)
    counters, per_answer = declared  # each engine one of the two
    assert (counters is None, per_answer is None) == ((False, True) if kind == "vllm" else (True, False))


def test_the_prefix_cache_hit_rate_is_hits_over_queries_between_the_two_reads():
    from servebench.load.runner import hit_rate

    assert hit_rate((100.0, 40.0), (612.0, 424.0)) == pytest.approx(384 / 512)
    assert hit_rate((100.0, 40.0), (100.0, 40.0)) is None      # nothing looked up
    assert hit_rate((None, 40.0), (612.0, 424.0)) is None      # a server without the counter
    assert hit_rate((100.0, 40.0), None) is None               # not read after (a hung server)


def test_a_hit_rate_from_the_responses_is_their_cached_over_all_their_prompt_tokens():
    from servebench.load.records import RequestRecord
    from servebench.load.runner import cache_counts, response_hit_rate

    records = [RequestRecord(index=0, warmup=True, cached_input_tokens=0, processed_input_tokens=272),
               RequestRecord(index=1, warmup=False, cached_input_tokens=256, processed_input_tokens=16),
               RequestRecord(index=2, warmup=False, error_kind="http")]  # said nothing: left out
    counts = cache_counts(records)
    assert counts == {"requests": 2, "cached": 256, "processed": 288}
    assert response_hit_rate(counts) == round(256 / 544, 4)
    assert response_hit_rate(cache_counts(records[2:])) is None  # no response said


def test_sessions_send_each_turn_after_the_answer_with_the_conversation_so_far():
    """S=3 sessions x T=4 turns, 2 at once: every turn's prompt starts with the turn before's prompt
    and its answer's length of filler; a session's next turn waits for its answer and the think time."""
    spec = {"kind": "sessions", "sessions": 3, "turns": 4, "first_input": 6, "turn_input": 3, "output": 4,
            "think_s": 0.05}
    with FakeServer() as server:
        result = run_load(LoadConfig(base_url=server.url, model="m", clients=2, vocab_size=100, timeout_s=5,
                                     workload=spec))
        sent = {tuple(body["prompt"]) for body in server.requests}
    records = result["requests"]
    assert len(records) == 12 and result["summary"]["completed"] == 12
    by_turn = {(r["session"], r["turn"]): r for r in records}
    assert set(by_turn) == {(s, t) for s in range(3) for t in range(4)}
    assert [by_turn[0, t]["input_tokens"] for t in range(4)] == [6, 13, 20, 27]  # + 4 answer + 3 user tokens
    assert {r["client"] for r in records} == {0, 1}
    for (session, turn), record in by_turn.items():
        if turn:
            before = by_turn[session, turn - 1]
            assert record["sent_s"] >= before["last_token_s"] + 0.05
            assert record["client"] == before["client"]
    for first in (p for p in sent if len(p) == 6):  # each session's turns, read from what was sent
        conversation = sorted((p for p in sent if p[:6] == first), key=len)
        assert [len(p) for p in conversation] == [6, 13, 20, 27]
        assert all(longer[:len(shorter)] == shorter for shorter, longer in zip(conversation, conversation[1:]))
    turns = result["summary"]["turns"]
    assert [(t["turn"], t["requests"], t["input_tokens_mean"]) for t in turns] == \
        [(0, 3, 6), (1, 3, 13), (2, 3, 20), (3, 3, 27)]


def test_an_unbounded_length_with_a_known_context_is_refused_for_a_duration_run():
    spec = {"kind": "synthetic", "input": {"dist": "normal", "mean": 50, "stdev": 10}}
    config = LoadConfig(base_url="http://127.0.0.1:9", model="m", clients=1, duration=1.0, max_context=512,
                        workload=spec)
    with pytest.raises(WorkloadError, match=r"workload synthetic: with --duration and the model's context known "
                                            r"\(512\), give every normal or lognormal length a max"):
        run_load(config)


def test_an_azure_trace_replays_its_datetime_offsets_with_random_prompts_of_its_lengths(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0000000,10,2\n"
                    "2023-11-16 18:15:46.2500000,30,5\n2023-11-16 18:15:47.0000000,20,1\n")
    spec = workload_from_data({"kind": "trace", "format": "azure", "path": str(path), "time_scale": 2})
    work = Workload(endpoint="completions", input_len=8, output_len=4, vocab_size=1000, data_seed=0, spec=spec)
    assert work.offsets(None) == pytest.approx([0.0, 0.5, 2.0])
    assert [(len(work.item(i).prompt), work.item(i).output_len) for i in range(3)] == [(10, 2), (30, 5), (20, 1)]


def test_a_bisect_step_keeps_the_workload_with_its_data_files_found_from_anywhere(tmp_path):
    import yaml

    from servebench.bisect.steps import step_campaign
    from servebench.campaign.loading import load_campaign, parse_campaign

    mooncake(tmp_path, [{"timestamp": 0, "input_length": 40, "output_length": 4},
                        {"timestamp": 400, "input_length": 50, "output_length": 4}])
    path = tmp_path / "c.yaml"
    path.write_text("""
name: commits
provider: {kind: local, nodes: [{name: n0, cpus: "0"}]}
engine: {kind: llamacpp, source: {git: /src/llama.cpp, commits: [b6500, b6600]}}
model: {generate: tiny-llama}
modes: [{name: tp1, executor: local}]
load: {rates: [2], requests: 4, client: {cpus: "1"}, workload: {kind: trace, format: mooncake, path: trace.jsonl}}
""")
    campaign = load_campaign(path, host_cpus={0, 1})
    step = step_campaign(yaml.safe_load(path.read_text()), campaign, tmp_path, "tp1-b6500", "f" * 40, repeats=1)
    elsewhere = parse_campaign(yaml.safe_dump(step), base_dir=tmp_path / "steps", host_cpus={0, 1})
    assert elsewhere.load.workload[0].path == str(tmp_path / "trace.jsonl")


def test_a_token_id_prompt_the_server_counts_otherwise_makes_the_run_invalid():
    from servebench.load.records import RequestRecord
    from servebench.load.runner import _add_prompt_check

    def served(index: int, sent: int, counted: int | None) -> RequestRecord:
        return RequestRecord(index=index, warmup=False, expected_input_tokens=sent, input_tokens=counted)

    summary = {"valid": True, "invalid_reasons": []}
    _add_prompt_check(summary, [served(0, 64, 64), served(1, 64, None)])  # a failed request counted nothing
    assert summary == {"valid": True, "invalid_reasons": [], "prompt_token_mismatches": 0}
    _add_prompt_check(summary, [served(0, 64, 64), served(1, 64, 65), served(2, 30, 31)])
    assert not summary["valid"] and summary["prompt_token_mismatches"] == 2
    assert summary["invalid_reasons"] == ["2 prompts of token ids were counted otherwise by the server "
                                          "(request 1: 64 sent, 65 counted)"]
