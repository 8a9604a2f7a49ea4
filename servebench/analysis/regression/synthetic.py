"""Synthetic histories with planted changes, and the detector replayed night by night over them.

Shared by the detection tests (which assert recall and false alarms at the default settings)
and `benchmarks/detection.py` (which measures them over many seeds).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel

from servebench.analysis.regression.detect import Finding, analyze
from servebench.analysis.regression.series import METRICS, Night
from servebench.config.detection import DetectionSettings

EPOCH = datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc)


def history(levels: list[float], noise: float, repeats: int, seed: int,
            outlier_repeats: dict[int, float] | None = None) -> list[Night]:
    """One night per level (a multiplier of 100), `repeats` values with relative Gaussian noise.
    outlier_repeats: night -> multiplier applied to that night's first repeat only."""
    rng = random.Random(seed)
    nights = []
    for i, level in enumerate(levels):
        values = [100.0 * level * (1 + rng.gauss(0, noise)) for _ in range(repeats)]
        if outlier_repeats and i in outlier_repeats:
            values[0] *= outlier_repeats[i]
        nights.append(Night(run_id=f"night{i:03d}", at=EPOCH + timedelta(days=i), values=values,
                            engine_version=f"0.{i // 10}.0"))
    return nights


def step(nights: int, at: int, size: float) -> list[float]:
    return [1.0 if i < at else 1.0 + size for i in range(nights)]


def drift(nights: int, start: int, per_night: float) -> list[float]:
    return [1.0 + per_night * max(0, i - start + 1) for i in range(nights)]


def outlier_night(nights: int, at: int, size: float) -> list[float]:
    return [1.0 + size if i == at else 1.0 for i in range(nights)]


class Replay(BaseModel):
    findings: dict[int, Finding]   # night index -> tonight's finding (alarms and noisy nights)

    def alarms(self, kind: str = "regression", status: tuple[str, ...] = ("suspected", "confirmed")) -> list[int]:
        return [i for i, f in sorted(self.findings.items()) if f.kind == kind and f.status in status]

    def any_alarm(self) -> list[int]:
        return [i for i, f in sorted(self.findings.items()) if f.kind in ("regression", "improvement")]


def replay(nights: list[Night], metric: str = "output_throughput", settings: DetectionSettings | None = None,
           start: int = 1) -> Replay:
    """Run tonight's analysis as each night arrives."""
    found = {}
    for i in range(start, len(nights)):
        finding = analyze(nights[:i + 1], METRICS[metric], settings)
        if finding is not None:
            found[i] = finding
    return Replay(findings=found)
