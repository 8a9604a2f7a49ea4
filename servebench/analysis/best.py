"""The best known configuration per cluster and model (`servebench best`): of every
capacity the warehouse holds, the highest for each (hardware fingerprint, model, what was
searched, SLO, input and output lengths). Capacities are compared only on the same workload,
under the same SLO and the same search (rate or clients); a newer run wins a tie, being the more
current evidence. Pure: rows in (`servebench.warehouse.history.capacity_history`), winners out."""

from __future__ import annotations

import json


def best_per_cluster(history: list[dict]) -> list[dict]:
    """One row per (fingerprint, model, search_over, slo, lengths): the highest capacity (then the
    newest), with how many capacities of that group it was chosen from."""
    groups: dict[tuple, list[dict]] = {}
    for row in history:
        key = (row["hardware_fingerprint"], row["model_path"], row["search_over"], _canonical(row["slo"]),
               row.get("input_len"), row.get("output_len"))
        groups.setdefault(key, []).append(row)
    best = []
    for key, found in groups.items():
        winner = max(found, key=lambda r: (r["capacity"], str(r["started_at"])))
        best.append({**winner, "slo": key[3], "candidates": len(found), "runs": len({r["run_id"] for r in found})})
    return sorted(best, key=lambda r: (str(r["hardware_fingerprint"]), str(r["model_path"]), r["search_over"],
                                       r["slo"]))


def _canonical(slo: str | dict) -> str:
    return json.dumps(json.loads(slo) if isinstance(slo, str) else slo, sort_keys=True)
