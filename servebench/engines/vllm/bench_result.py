"""Export a run in the JSON layout of `vllm bench serve --save-result`, so existing tools
(vLLM's own plotting scripts, dashboards fed by it) can read servebench runs.

Only completed requests carry timings there; errors are listed by message. Percentile
keys follow vLLM's naming (p99_ttft_ms, ...), computed with the same estimator.
"""

from __future__ import annotations

from datetime import datetime
from statistics import pstdev

from servebench.load.metrics import e2el, itls, percentile, tpot, ttft
from servebench.load.records import RequestRecord

VLLM_PERCENTILES = (50, 90, 95, 99, 99.9)


def to_vllm_result(result: dict) -> dict:
    config, summary = result["config"], result["summary"]
    records = [RequestRecord(**{k: v for k, v in r.items()}) for r in result["requests"] if not r["warmup"]]
    ok = [r for r in records if r.ok]
    out = {
        "date": datetime.fromisoformat(result["t0"]["wall"]).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if config["endpoint"] == "chat" else "openai",
        "backend": "openai-chat" if config["endpoint"] == "chat" else "openai",
        "label": "servebench",
        "model_id": config["model"],
        "tokenizer_id": config.get("tokenizer"),
        "num_prompts": len(records),
        "request_rate": config["rate"] if config["rate"] is not None else "inf",
        "burstiness": config["burstiness"],
        "max_concurrency": config["clients"],
        "duration": summary["duration_s"],
        "completed": summary["completed"],
        "failed": summary["failed"],
        "total_input_tokens": summary["total_input_tokens"],
        "total_output_tokens": summary["total_output_tokens"],
        "request_throughput": summary["request_throughput"],
        "request_goodput": summary["goodput"],
        "output_throughput": summary["output_throughput"],
        "total_token_throughput": summary["total_token_throughput"],
        "input_lens": [r.input_tokens for r in ok],
        "output_lens": [r.output_tokens for r in ok],
        "ttfts": [ttft(r) for r in ok],
        "itls": [itls(r) for r in ok],
        "latencies": [e2el(r) for r in ok],
        "start_times": [r.sent_s for r in ok],
        "generated_texts": ["" for _ in ok],  # servebench does not keep generated text
        "errors": [r.error or "" for r in records if not r.ok],
    }
    for name, metric in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)):
        _add_stats(out, name, [v for v in (metric(r) for r in ok) if v is not None])
    _add_stats(out, "itl", [gap for r in ok for gap in itls(r)])
    return out


def _add_stats(out: dict, name: str, seconds: list[float]) -> None:
    values = sorted(v * 1000.0 for v in seconds)
    out[f"mean_{name}_ms"] = sum(values) / len(values) if values else 0.0
    out[f"median_{name}_ms"] = percentile(values, 50) if values else 0.0
    out[f"std_{name}_ms"] = pstdev(values) if values else 0.0
    for p in VLLM_PERCENTILES:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = percentile(values, p) if values else 0.0
