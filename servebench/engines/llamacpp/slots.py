"""llama-server's `/slots`, sampled with its metrics during a cell: the KV tokens the slots that are
processing hold now (`n_prompt_tokens` is a slot's cached token list: prompt plus the tokens
generated so far). Idle slots are left out: with `--cache-idle-slots` (on by default) an idle slot
is saved to the RAM prompt cache and cleared when a task starts, so what it holds is not in use.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def kv_tokens(slots: list[dict]) -> dict[str, float]:
    """{'kv_tokens': tokens held by the processing slots} from a /slots answer."""
    busy = [slot for slot in slots if slot.get("is_processing")]
    return {"kv_tokens": float(sum(int(slot.get("n_prompt_tokens") or 0) for slot in busy))}


def sample_slots(url: str, timeout_s: float = 2.0) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/slots", timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return kv_tokens(answer) if isinstance(answer, list) else None
