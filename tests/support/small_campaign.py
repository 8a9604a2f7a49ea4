"""The smallest campaign a test of pure logic or of the warehouse needs: the local provider, the
generated model, one mode (`tp1`), with the load and any further top-level blocks the test asks for."""

from __future__ import annotations


def small_campaign_text(load: str = "{clients: [1, 2], requests: 2}", **blocks: str) -> str:
    """The campaign's YAML; `blocks`: top-level blocks as flow-style YAML (`slo="{ttft_p99_ms: 500}"`)."""
    lines = ["name: t", 'provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}', "model: {generate: tiny-llama}",
             "modes: [{name: tp1}]", f"load: {load}", *(f"{name}: {value}" for name, value in blocks.items())]
    return "\n".join(lines) + "\n"
