"""The correctness gate: a distributed server must generate what a single worker does.

Before any load, every server answers a fixed set of prompts greedily (temperature 0,
token ids and top logprobs returned). The generated token ids must equal those of the
TP=1 reference for the same model and engine defaults, computed once per campaign. A
mode whose sharding is wrong (a bad all-reduce, a stage on the wrong layers) is caught
here instead of producing fast nonsense.
"""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request

from pydantic import BaseModel

GATE_PROMPTS = 4
GATE_PROMPT_LEN = 16
GATE_OUTPUT_LEN = 16
GATE_LOGPROBS = 2
FIRST_ID = 3


class GateAnswer(BaseModel):
    tokens: list[list[int]]            # generated token ids, per prompt
    logprobs: list[list[float]]        # logprob of each generated token


class GateResult(BaseModel):
    status: str                        # reference | passed | failed
    detail: str


def gate_prompts(vocab_size: int) -> list[list[int]]:
    rng = random.Random(20261121)
    return [[rng.randrange(FIRST_ID, vocab_size) for _ in range(GATE_PROMPT_LEN)] for _ in range(GATE_PROMPTS)]


def ask(base_url: str, model: str, vocab_size: int, timeout_s: float = 120.0) -> GateAnswer:
    """The server's greedy answers to the gate prompts."""
    tokens, logprobs = [], []
    for prompt in gate_prompts(vocab_size):
        body = {"model": model, "prompt": prompt, "max_tokens": GATE_OUTPUT_LEN, "temperature": 0.0,
                "ignore_eos": True, "logprobs": GATE_LOGPROBS, "return_tokens_as_token_ids": True}
        request = urllib.request.Request(base_url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            choice = json.loads(response.read())["choices"][0]
        tokens.append([_token_id(t) for t in choice["logprobs"]["tokens"]])
        logprobs.append([float(lp) for lp in choice["logprobs"]["token_logprobs"]])
    return GateAnswer(tokens=tokens, logprobs=logprobs)


def compare(reference: GateAnswer, answer: GateAnswer) -> GateResult:
    """Passed when every generated token id equals the reference's; the detail names the first divergence."""
    diverged = []
    for index, (want, got) in enumerate(zip(reference.tokens, answer.tokens)):
        if want != got:
            at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            diverged.append(f"prompt {index}: first difference at token {at}: reference {want[at:at + 4]} "
                            f"vs {got[at:at + 4]}")
    drift = max((abs(a - b) for ref, got in zip(reference.logprobs, answer.logprobs) for a, b in zip(ref, got)),
                default=0.0)
    if diverged:
        return GateResult(status="failed", detail="; ".join(diverged) + f" (max logprob difference {drift:.4f})")
    return GateResult(status="passed", detail=f"{len(reference.tokens)} prompts x {GATE_OUTPUT_LEN} tokens equal "
                                              f"to the TP=1 reference; max logprob difference {drift:.4f}")


def _token_id(token: str) -> int:
    if not token.startswith("token_id:"):
        raise ValueError(f"expected 'token_id:N' tokens (return_tokens_as_token_ids), got {token!r}")
    return int(token.removeprefix("token_id:"))
