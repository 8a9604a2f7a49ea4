"""The correctness gate: a distributed server must generate what a single worker does.

Before any load, every server answers a fixed set of prompts greedily (temperature 0,
token ids and top logprobs returned). The generated token ids must equal those of the
TP=1 reference for the same model and engine defaults, computed once per campaign. A
mode whose sharding is wrong (a bad all-reduce, a stage on the wrong layers) is caught
here instead of producing fast nonsense.

Verdicts: `passed` when every token is equal; `close` when two greedy sequences part only
at a near-tie: at the first difference each side's token is among the other's top
GATE_LOGPROBS candidates (the criterion of vLLM's own tests; sharded kernels round bf16
differently, and a random-weight model's nearly flat logits tie often); `failed`
otherwise. A broken shard diverges at once and far outside the top candidates.
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
GATE_LOGPROBS = 5
FIRST_ID = 3


class GateAnswer(BaseModel):
    tokens: list[list[int]]            # generated token ids, per prompt
    logprobs: list[list[float]]        # logprob of each generated token
    top: list[list[list[int]]] = []    # the top GATE_LOGPROBS candidate ids at each position


class GateResult(BaseModel):
    status: str                        # reference | passed | failed
    detail: str


def gate_prompts(vocab_size: int) -> list[list[int]]:
    rng = random.Random(20261121)
    return [[rng.randrange(FIRST_ID, vocab_size) for _ in range(GATE_PROMPT_LEN)] for _ in range(GATE_PROMPTS)]


def ask(base_url: str, model: str, vocab_size: int, timeout_s: float = 120.0) -> GateAnswer:
    """The server's greedy answers to the gate prompts."""
    tokens, logprobs, top = [], [], []
    for prompt in gate_prompts(vocab_size):
        body = {"model": model, "prompt": prompt, "max_tokens": GATE_OUTPUT_LEN, "temperature": 0.0,
                "ignore_eos": True, "logprobs": GATE_LOGPROBS, "return_tokens_as_token_ids": True}
        request = urllib.request.Request(base_url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            choice = json.loads(response.read())["choices"][0]
        tokens.append([_token_id(t) for t in choice["logprobs"]["tokens"]])
        logprobs.append([float(lp) for lp in choice["logprobs"]["token_logprobs"]])
        top.append([[_token_id(t) for t in (candidates or {})] for candidates in choice["logprobs"]["top_logprobs"]])
    return GateAnswer(tokens=tokens, logprobs=logprobs, top=top)


def compare(reference: GateAnswer, answer: GateAnswer) -> GateResult:
    """passed / close / failed (see the module's docstring); the detail names every divergence."""
    failures, ties, drift = [], [], 0.0
    for index, (want, got) in enumerate(zip(reference.tokens, answer.tokens)):
        at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
        upto = len(want) if at is None else at
        drift = max([drift] + [abs(a - b) for a, b in zip(reference.logprobs[index][:upto],
                                                          answer.logprobs[index][:upto])])
        if at is None:
            continue
        where = f"prompt {index} token {at}: reference {want[at:at + 4]} vs {got[at:at + 4]}"
        if _near_tie(reference, answer, index, at):
            ties.append(where)
        else:
            failures.append(where)
    tail = f"; max logprob difference before any divergence {drift:.4f}"
    if failures:
        return GateResult(status="failed", detail="diverged outside the top candidates: " + "; ".join(failures)
                          + (f"; near-ties: {'; '.join(ties)}" if ties else "") + tail)
    if ties:
        return GateResult(status="close", detail=f"equal up to near-ties (each token in the other's top "
                                                 f"{GATE_LOGPROBS}): " + "; ".join(ties) + tail)
    return GateResult(status="passed", detail=f"{len(reference.tokens)} prompts x {GATE_OUTPUT_LEN} tokens equal "
                                              f"to the TP=1 reference{tail}")


def blocks_cells(result: GateResult, accept: str) -> bool:
    """Whether the mode's cells must not run: a failure always; a near-tie unless accepted."""
    return result.status == "failed" or (result.status == "close" and accept != "near-ties")


def _near_tie(reference: GateAnswer, answer: GateAnswer, prompt: int, at: int) -> bool:
    if not reference.top or not answer.top:
        return False
    return (answer.tokens[prompt][at] in reference.top[prompt][at]
            and reference.tokens[prompt][at] in answer.top[prompt][at])


def _token_id(token: str) -> int:
    if not token.startswith("token_id:"):
        raise ValueError(f"expected 'token_id:N' tokens (return_tokens_as_token_ids), got {token!r}")
    return int(token.removeprefix("token_id:"))
