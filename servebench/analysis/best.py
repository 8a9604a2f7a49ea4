"""The best known configuration per cluster and model (`servebench best`): of every
capacity the warehouse holds, the highest for each (hardware fingerprint, model, what was
searched, SLO, input and output lengths). Capacities are compared only on the same workload,
under the same SLO and the same search (rate or clients); a newer run wins a tie, being the more
current evidence. Pure: rows in (`servebench.warehouse.history.capacity_history`), winners out.

A run without a capacity search still answers per load point (`best_per_point`): of the modes
whose every repeat met the campaign's SLO there, the highest median output throughput, with its
margin over the next mode judged as `servebench compare` judges a change (docs/capacity.md)."""

from __future__ import annotations

import json
import statistics

from pydantic import BaseModel


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


# the best mode per load point of one run, from its cells under the campaign's SLO


class ModeAtPoint(BaseModel):
    """One mode at one load point: its repeats, how many met the SLO, its median output throughput."""

    mode: str
    repeats: int
    valid: int
    met: int | None                   # repeats that met the SLO; None: the campaign has none
    throughput: float | None          # median output throughput of the repeats that count [tok/s]
    values: list[float]               # those repeats' output throughputs
    slo_headroom: float | None        # the worst repeat's 1 - max(observed / limit), over the limits cells keep
    missed: list[str]                 # why repeats missed the SLO (or were not valid), once each

    @property
    def qualifies(self) -> bool:
        """Every repeat met the SLO (with no SLO: a valid repeat and a throughput)."""
        if self.met is None:
            return self.valid > 0 and self.throughput is not None
        return self.repeats > 0 and self.met == self.repeats and self.throughput is not None


class PointBest(BaseModel):
    """A load point's best mode under the SLO and its margin over the next mode that met it."""

    point: str                        # as cell keys name it: c8, rate2
    load: str                         # '8 clients', '2 req/s'
    best: str | None                  # None: no mode met the SLO here
    throughput: float | None          # the best mode's median output throughput [tok/s]
    slo_headroom: float | None
    runner_up: str | None
    margin: float | None              # best / runner-up - 1 (output throughput)
    margin_verdict: str | None        # servebench compare's verdict on it: better | within noise | same | untested
    missed: list[ModeAtPoint]         # the modes that missed the SLO here (or had no valid cell)
    modes: list[ModeAtPoint]          # every mode measured here, best first


def best_per_point(cells: list[dict], slo: dict[str, float]) -> list[PointBest]:
    """Per load point of a run's cells (`history.point_cells`), the mode with the highest median
    output throughput among those whose every repeat met `slo` (empty: every valid repeat counts), its
    margin over the next such mode judged as `servebench compare` judges a change, and the modes
    that missed. A cell's verdict is the one landed (`cells.slo_met`); a cell landed without one is
    judged on the percentiles cells keep (p50, p99)."""
    from servebench.analysis.regression.series import cell_point

    by_point: dict[tuple, dict[str, list[dict]]] = {}
    for cell in cells:
        point = cell_point(cell["cell_key"])[len(cell["mode"]) + 1:]
        key = (cell["load_kind"] != "closed", cell["clients"] or 0, cell["offered_rate"] or 0.0, point)
        by_point.setdefault(key, {}).setdefault(cell["mode"], []).append(cell)
    found = []
    for key in sorted(by_point):
        modes = [mode_at_point(mode, repeats, slo) for mode, repeats in sorted(by_point[key].items())]
        found.append(point_best(key[3], load_text(next(iter(by_point[key].values()))[0]), modes))
    return found


def mode_at_point(mode: str, repeats: list[dict], slo: dict[str, float]) -> ModeAtPoint:
    valid = [cell for cell in repeats if cell["status"] == "completed" and cell["valid"]]
    verdicts = [repeat_verdict(cell, slo) for cell in repeats] if slo else []
    counted = [cell for cell, (met, _) in zip(repeats, verdicts) if met] if slo else valid
    values = [float(cell["output_throughput"]) for cell in counted if cell["output_throughput"] is not None]
    headrooms = [h for cell in repeats if (h := slo_headroom(cell, slo)) is not None] if slo else []
    missed = list(dict.fromkeys(why for _, why in verdicts if why))
    if not slo and len(valid) < len(repeats):
        missed.append(f"{len(repeats) - len(valid)} of {len(repeats)} repeats not valid")
    return ModeAtPoint(mode=mode, repeats=len(repeats), valid=len(valid),
                       met=sum(1 for met, _ in verdicts if met) if slo else None,
                       throughput=statistics.median(values) if values else None, values=values,
                       slo_headroom=min(headrooms) if headrooms else None, missed=missed)


def repeat_verdict(cell: dict, slo: dict[str, float]) -> tuple[bool, str | None]:
    """Whether one repeat met the SLO, and why not: not completed, not valid, a limit exceeded."""
    if cell["status"] != "completed":
        return False, f"not completed ({cell['status']})"
    if not cell["valid"]:
        reasons = cell.get("invalid_reasons") or []
        return False, "not valid" + (f": {reasons[0]}" if reasons else "")
    exceeded = [f"{key} {value:.4g} > {limit:g}" for key, limit in slo.items()
                if (value := cell.get(key)) is not None and value > limit]
    met = cell["slo_met"]
    if met is None:  # landed without a verdict: judged on the percentiles cells keep
        if any(cell.get(key) is None for key in slo):
            return False, "not judged: the cells keep only p50 and p99"
        met = not exceeded
    if met:
        return True, None
    return False, ", ".join(exceeded) or "missed the SLO (as landed)"


def slo_headroom(cell: dict, slo: dict[str, float]) -> float | None:
    """1 - max(observed / limit) over the limits whose percentile cells keep (None: none of them)."""
    ratios = [value / limit for key, limit in slo.items() if (value := cell.get(key)) is not None]
    return 1.0 - max(ratios) if ratios else None


def point_best(point: str, load: str, modes: list[ModeAtPoint]) -> PointBest:
    from servebench.analysis.dispersion import spread
    from servebench.analysis.regression.compare import COMPARE_ALPHA, MIN_EFFECT, verdict
    from servebench.analysis.regression.detect import relative_change, u_test

    ranked = sorted((m for m in modes if m.qualifies), key=lambda m: -(m.throughput or 0.0))
    missed = [m for m in modes if not m.qualifies]
    best = ranked[0] if ranked else None
    runner = ranked[1] if len(ranked) > 1 else None
    margin = judged = None
    if best is not None and runner is not None and best.throughput and runner.throughput:
        margin = relative_change(best.throughput, runner.throughput)
        testable = len(best.values) > 1 and len(runner.values) > 1
        p = u_test(best.values, runner.values, "two-sided") if testable else None
        overlap = spread(best.values).overlaps(spread(runner.values))
        judged = verdict(p, margin, overlap, "higher", COMPARE_ALPHA, MIN_EFFECT)
    return PointBest(point=point, load=load, best=best.mode if best else None,
                     throughput=best.throughput if best else None, slo_headroom=best.slo_headroom if best else None,
                     runner_up=runner.mode if runner else None, margin=margin, margin_verdict=judged, missed=missed,
                     modes=ranked + missed)


def load_text(cell: dict) -> str:
    """'8 clients', '1 client', '2 req/s'."""
    if cell["load_kind"] == "closed" and cell["clients"] is not None:
        return f"{cell['clients']} client" + ("" if cell["clients"] == 1 else "s")
    return f"{cell['offered_rate']:g} req/s" if cell["offered_rate"] is not None else cell["load_kind"]
