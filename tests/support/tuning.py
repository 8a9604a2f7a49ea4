"""What tests/unit/test_tuning.py and tests/e2e/test_tuning.py share."""

from __future__ import annotations

TUNE = """
name: tune
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 1}
model: {path: model}
modes: [{name: single}]
knobs: {prefill_ms: [100, 50, 400]}    # 10 req/s (the default), 20 (Optuna's second trial, seed 0), 2.5
load: {rates: [5], requests: 20, arrival: constant, input_len: 4, output_len: 4, client: {cpus: "1"}}
slo: {ttft_p99_ms: 400}
search: {kind: tune, strategy: optuna, trials: 2, start: 16, precision: 0.25, max_probes: 4}
validity: {on_invalid: warn, max_schedule_lag_ms: 50}   # TTFT counts from the schedule: a late client still pays
"""
