"""The correctness gate: a distributed server must generate what a single worker does.

Before any load, every server answers a fixed set of prompts greedily (temperature 0,
ignore_eos, token ids, their logprobs and the top GATE_LOGPROBS candidates returned).
The answers are judged against those of a TP=1 reference server for the same model and
engine defaults, computed once per campaign. A mode whose sharding is wrong (a bad
all-reduce, a stage on the wrong layers) is caught here instead of producing fast nonsense.

Why not demand equal tokens: bf16 kernels round differently on different CPUs (an AMD
EPYC and an Intel Xeon take different vector paths) and in a different reduction order
once sharded, and a random-weight model's greedy choices are full of near-ties, its top
logprobs 0.004 apart. Such a server is right and still parts from the reference now and
then. A broken shard, by contrast, diverges at once and far outside the top candidates.

So the criterion is the one vLLM's own tests use (`check_logprobs_close` in vLLM's
tests/models/utils.py): walk each prompt's tokens; at the FIRST position where the two
greedy tokens differ, each side's token must be among the other side's top candidates
there. That prompt's comparison stops at that position: later tokens follow different
prefixes and say nothing about the server. Stricter than vLLM's, the number of prompts
answered and every answer's length must equal the reference's (a truncated answer is
not a close one), and missing top candidates prove no near-tie.

Verdicts: `passed` when every token is equal; `close` when every divergence is such a
near-tie (recorded with its prompt, position and logprob gap); `failed` otherwise;
`reference` for the TP=1 server's own answers; `unchecked` when no reference could be
produced (or, for a server servebench did not start, when the campaign names no reference: never a
pass it could not check). `blocks_cells` turns a verdict into "run the mode's cells or not".
"""

from __future__ import annotations

import json
import random
import urllib.request
from typing import Any, Callable, Literal, Mapping

from pydantic import BaseModel

from servebench.engines.base import GateChoice

GATE_PROMPTS = 4
GATE_PROMPT_LEN = 16
GATE_OUTPUT_LEN = 16
GATE_LOGPROBS = 5
FIRST_ID = 3

Status = Literal["reference", "passed", "close", "failed", "unchecked"]
Accept = Literal["close", "equal", "near-ties"]
# "near-ties" is the old spelling of "close", still found in campaign files.
ACCEPT_SYNONYMS: dict[str, str] = {"near-ties": "close"}


class GateAnswer(BaseModel):
    tokens: list[list[int]]            # generated token ids, per prompt
    logprobs: list[list[float]]        # logprob of each generated token
    top: list[list[list[int]]] = []    # the top GATE_LOGPROBS candidate ids at each position


class Divergence(BaseModel):
    """Where one prompt's answer first parted from the reference; nothing after it is compared."""
    prompt: int
    position: int
    reference_token: int
    token: int
    logprob_gap: float | None          # |each side's logprob of its own token| apart; None if one was not reported
    near_tie: bool                     # each side's token among the other's top candidates


class GateResult(BaseModel):
    status: Status
    detail: str
    first_divergence: list[Divergence] = []        # one per diverging prompt, near-tie or not
    max_prefix_logprob_diff: float | None = None   # largest |logprob difference| before any divergence


def gate_prompts(vocab_size: int) -> list[list[int]]:
    rng = random.Random(20261121)
    return [[rng.randrange(FIRST_ID, vocab_size) for _ in range(GATE_PROMPT_LEN)] for _ in range(GATE_PROMPTS)]


def ask(base_url: str, model: str, vocab_size: int, extras: Mapping[str, Any],
        read_choice: Callable[[dict], GateChoice], timeout_s: float = 120.0, api_key: str | None = None
        ) -> GateAnswer:
    """The server's greedy answers to the gate prompts (OpenAI completions with logprobs; the
    engine's `extras` make it answer exactly GATE_OUTPUT_LEN tokens, and its `read_choice` reads
    the token ids, logprobs and top candidates from each answer); with `api_key`, the run's token,
    sent as `Authorization: Bearer` (never logged: an error says the status, not the request)."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    tokens, logprobs, top = [], [], []
    for prompt in gate_prompts(vocab_size):
        body = {"model": model, "prompt": prompt, "max_tokens": GATE_OUTPUT_LEN, "temperature": 0.0,
                "logprobs": GATE_LOGPROBS, **extras}
        request = urllib.request.Request(base_url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            choice = json.loads(response.read())["choices"][0]
        ids, lps, candidates = read_choice(choice)
        tokens.append(ids)
        logprobs.append(lps)
        top.append(candidates)
    return GateAnswer(tokens=tokens, logprobs=logprobs, top=top)


def compare(reference: GateAnswer, answer: GateAnswer) -> GateResult:
    """passed / close / failed (see the module's docstring); the detail names every divergence."""
    problems = _shape_problems(reference, answer)
    divergences: list[Divergence] = []
    prefix_diffs: list[float] = []
    for prompt in range(min(len(reference.tokens), len(answer.tokens))):
        at = _first_difference(reference.tokens[prompt], answer.tokens[prompt])
        prefix_diffs += _prefix_diffs(reference, answer, prompt, at)
        if at is not None:
            divergence, reasons = _divergence(reference, answer, prompt, at)
            divergences.append(divergence)
            problems += [f"prompt {prompt} token {at}: {reason}" for reason in reasons]
    return _verdict(reference, problems, divergences, max(prefix_diffs, default=None))


def unchecked(reason: str) -> GateResult:
    """The verdict when there is no reference to compare with: the TP=1 reference server could not answer,
    or the campaign names none (a server servebench did not start is judged only against one it names)."""
    return GateResult(status="unchecked", detail=f"not checked: {reason}; the cells run with no reference "
                                                 "answers to compare with")


def blocks_cells(result: GateResult, accept: Accept = "close") -> bool:
    """Whether the mode's cells must not run: a failure always; a near-tie unless `accept` is "close".

    `unchecked` never blocks: a reference server that would not start says nothing about this
    mode, and the cells carry the verdict instead."""
    wanted = ACCEPT_SYNONYMS.get(accept, accept)
    if wanted not in ("close", "equal"):
        raise ValueError(f"accept must be 'close' or 'equal' (or 'near-ties'), got {accept!r}")
    return result.status == "failed" or (result.status == "close" and wanted == "equal")


def _shape_problems(reference: GateAnswer, answer: GateAnswer) -> list[str]:
    """Counts and lengths that differ: zip would silently compare only the common part."""
    want, got = reference.tokens, answer.tokens
    problems = [f"answered {len(got)} prompts, the reference {len(want)}"] if len(got) != len(want) else []
    return problems + [f"prompt {prompt}: {len(g)} tokens, the reference {len(w)}"
                       for prompt, (w, g) in enumerate(zip(want, got)) if len(g) != len(w)]


def _first_difference(want: list[int], got: list[int]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)


def _prefix_diffs(reference: GateAnswer, answer: GateAnswer, prompt: int, at: int | None) -> list[float]:
    """|logprob differences| on the prompt's equal prefix: how far apart the kernels are when they agree."""
    upto = min(len(reference.tokens[prompt]), len(answer.tokens[prompt])) if at is None else at
    pairs = ((_logprob(reference, prompt, i), _logprob(answer, prompt, i)) for i in range(upto))
    return [abs(a - b) for a, b in pairs if a is not None and b is not None]


def _divergence(reference: GateAnswer, answer: GateAnswer, prompt: int, at: int) -> tuple[Divergence, list[str]]:
    """The prompt's first divergence, and why it is not a near-tie (nothing when it is)."""
    want, got = reference.tokens[prompt][at], answer.tokens[prompt][at]
    reasons = (_not_among(got, "answer", _top(reference, prompt, at), "reference")
               + _not_among(want, "reference", _top(answer, prompt, at), "answer"))
    mine, theirs = _logprob(reference, prompt, at), _logprob(answer, prompt, at)
    gap = abs(mine - theirs) if mine is not None and theirs is not None else None
    return Divergence(prompt=prompt, position=at, reference_token=want, token=got, logprob_gap=gap,
                      near_tie=not reasons), reasons


def _not_among(token: int, whose: str, top: list[int], other: str) -> list[str]:
    if not top:
        return [f"the {other} reported no top candidates, so no near-tie can be shown"]
    return [] if token in top else [f"{whose} token {token} not in the {other}'s top-{len(top)}"]


def _verdict(reference: GateAnswer, problems: list[str], divergences: list[Divergence],
             drift: float | None) -> GateResult:
    ties = "; ".join(_describe(d) for d in divergences if d.near_tie)
    tail = "; max logprob difference before any divergence " + ("n/a" if drift is None else f"{drift:.4f}")
    if problems:
        detail = "; ".join(problems) + (f"; near-ties: {ties}" if ties else "")
        return GateResult(status="failed", detail=detail + tail, first_divergence=divergences,
                          max_prefix_logprob_diff=drift)
    if divergences:
        return GateResult(status="close", detail=f"parted from the TP=1 reference only at near-ties (each token "
                                                 f"among the other's top candidates): {ties}{tail}",
                          first_divergence=divergences, max_prefix_logprob_diff=drift)
    tokens = sum(len(row) for row in reference.tokens)
    return GateResult(status="passed", detail=f"{len(reference.tokens)} prompts, {tokens} tokens, all equal to the "
                                              f"TP=1 reference{tail}", max_prefix_logprob_diff=drift)


def _describe(d: Divergence) -> str:
    gap = "n/a" if d.logprob_gap is None else f"{d.logprob_gap:.4f}"
    return f"prompt {d.prompt} token {d.position}: reference {d.reference_token} vs {d.token} (logprob gap {gap})"


def _logprob(answer: GateAnswer, prompt: int, position: int) -> float | None:
    """The logprob of the answer's token, or None where a ragged answer did not report it."""
    try:
        return answer.logprobs[prompt][position]
    except IndexError:
        return None


def _top(answer: GateAnswer, prompt: int, position: int) -> list[int]:
    """The answer's top candidates at a position; none where a ragged answer did not report them."""
    try:
        return answer.top[prompt][position]
    except IndexError:
        return []
