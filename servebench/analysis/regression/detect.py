"""Regression detection over one series, in layers, so that noise does not page anyone.

(a) The gate: tonight's repeats against the repeats of the last K good nights, one-sided
    Mann-Whitney U (no normality assumed; latency is skewed) *and* a minimum effect size: a
    significant 1% change is not worth a morning.
    The effect must also exceed `noise_z` standard errors of the difference of the two
    medians, from the scatter measured within the window's nights: on a noisy series 5% is
    not news.
(b) Confirmation: change points over the whole history (since the last accepted baseline)
    with `ruptures` (PELT, least-squares cost, penalty scaled by the noise measured *within*
    nights, so a level shift does not inflate it). Each change point must also pass the
    U test and the effect size between the regimes it separates, else it is merged away.
    A change is confirmed when its last `confirm_nights` nights all stay beyond half the
    minimum effect on the same side; it is then reported every night until a user accepts
    it (annotation) or the series comes back.
(c) Annotations are applied before (a) and (b): excluded nights vanish; an accepted night
    starts the history afresh.

A gate alarm without a confirmed change point is `suspected` (a single bad night looks like
that too); `--fail-on-regression` fails on both, since a CI gate sees one night only.
"""

from __future__ import annotations

import math
import statistics
from typing import Literal

import numpy as np
from pydantic import BaseModel

from servebench.analysis.regression.series import Metric, Night
from servebench.config.detection import DetectionSettings

Kind = Literal["regression", "improvement", "noisy"]
Status = Literal["suspected", "confirmed", "noisy"]


class Finding(BaseModel):
    """What tonight's analysis says about one series and metric."""

    kind: Kind
    status: Status
    metric: str
    last_good_run: str | None = None
    first_bad_run: str | None = None
    baseline_value: float | None = None
    value: float | None = None
    change: float | None = None        # relative: value / baseline - 1 (signed)
    p_value: float | None = None
    change_point: bool = False         # (b) placed a change at first_bad_run
    nights_since_change: int = 0
    detail: str = ""


def analyze(nights: list[Night], metric: Metric, settings: DetectionSettings | None = None) -> Finding | None:
    """Tonight is the last night; None when there is nothing to say."""
    settings = settings or DetectionSettings()
    history = usable_history(nights)[-settings.history_nights:]
    if not history or history[-1].run_id != nights[-1].run_id:
        return None                                  # tonight itself was excluded
    tonight = history[-1]
    clean = [n for n in history if not n.noisy(metric)]
    earlier = [n for n in clean if n is not tonight]
    if tonight.noisy(metric) or not earlier:
        return _gate_only(tonight, history, earlier, metric, settings)
    clean = [n for i, n in enumerate(clean) if not _isolated(clean, i, settings)]
    starts = change_points(clean, settings)
    confirmed = _confirmed_change(clean, starts, metric, settings)
    if confirmed is not None:
        return confirmed
    if starts:           # a change too young to confirm: the gate compares with the nights before it
        return _gate(tonight, _before_change(clean, starts, settings), metric, settings, clean[starts[-1]], clean)
    return _gate(tonight, clean[:-1][-settings.baseline_nights:], metric, settings, None, clean)


def _gate_only(tonight: Night, history: list[Night], earlier: list[Night], metric: Metric,
               settings: DetectionSettings) -> Finding | None:
    """A noisy tonight is never a baseline nor a change point, but a gross change still shows.
    With no clean night before tonight, the noisy ones are the only baseline there is (their
    scatter raises the noise floor accordingly): better than silence on a 70% drop."""
    notes = []
    if tonight.noisy(metric):
        notes.append(f"repeats vary by {tonight.cv:.1%} (limit {metric.cv_limit:.0%})")
    if earlier:
        finding = _gate(tonight, earlier[-settings.baseline_nights:], metric, settings, None, earlier + [tonight])
    else:
        if len(history) > 1:
            notes.append("no clean night before: the baseline is noisy nights")
        finding = _gate(tonight, history[:-1][-settings.baseline_nights:], metric, settings, None, history)
    if finding is None:
        if not tonight.noisy(metric):
            return None
        return Finding(kind="noisy", status="noisy", metric=metric.name, value=tonight.value,
                       detail="; ".join(notes + ["no change beyond the noise"]))
    return finding.model_copy(update={"detail": "; ".join(notes + [finding.detail])})


def usable_history(nights: list[Night]) -> list[Night]:
    """Annotations applied: history starts at the last accepted night; excluded nights vanish."""
    start = max((i for i, n in enumerate(nights) if n.accepted), default=0)
    return [n for n in nights[start:] if not n.excluded]


def change_points(nights: list[Night], settings: DetectionSettings) -> list[int]:
    """Indices of the nights that start a new regime, each significant and large enough.

    PELT runs over night means (one point per night keeps it fast); its penalty uses the
    variance of a night mean, from the scatter *within* nights."""
    if len(nights) < 2:
        return []
    scale = abs(statistics.median(_values(nights))) or 1.0
    import ruptures  # here: with scipy, seconds of every campaign process's start, and most runs have no history

    signal = np.array([statistics.fmean(n.values) / scale for n in nights], dtype=float)
    repeats = statistics.fmean(len(n.values) for n in nights)
    sigma2 = max(_noise_variance(nights, scale) / repeats, 1e-8)
    ends = ruptures.Pelt(model="l2", min_size=1, jump=1).fit(signal).predict(
        pen=settings.penalty * sigma2 * math.log(len(signal)))
    return _validated(nights, [e for e in ends if 0 < e < len(nights)], settings)


def _isolated(nights: list[Night], index: int, settings: DetectionSettings, width: int = 3) -> bool:
    """An outlier night: off, the same way, from both the nights before and the nights after it
    (a step's first night agrees with the nights after; tonight has no nights after)."""
    before, after = nights[max(0, index - width):index], nights[index + 1:index + 1 + width]
    if not before or not after:
        return False
    value = nights[index].value
    offsets = []
    for side in (before, after):
        level = statistics.median([n.value for n in side])
        offsets.append(relative_change(value, level))
        noise = math.sqrt(_noise_variance(side, level or 1.0) / len(nights[index].values))
        if abs(offsets[-1]) < max(settings.min_effect, settings.noise_z * noise):
            return False
    return (offsets[0] > 0) == (offsets[1] > 0)


def _validated(nights: list[Night], starts: list[int], settings: DetectionSettings) -> list[int]:
    """Drop, one at a time, the change point whose regimes differ least, until all pass."""
    starts = list(starts)
    while starts:
        edges = [0, *starts, len(nights)]
        scores = []
        for i in range(1, len(edges) - 1):
            left, right = _values(nights[edges[i - 1]:edges[i]]), _values(nights[edges[i]:edges[i + 1]])
            p = u_test(right, left, "two-sided")
            change = relative_change(statistics.median(right), statistics.median(left))
            long_enough = edges[i] - edges[i - 1] >= 2          # one night is not a baseline
            scores.append((long_enough and p < settings.alpha and abs(change) >= settings.min_effect, -p, i - 1))
        failing = [s for s in scores if not s[0]]
        if not failing:
            return starts
        starts.pop(min(failing, key=lambda s: s[1])[2])        # the least significant goes first
    return starts


def _confirmed_change(clean: list[Night], starts: list[int], metric: Metric,
                      settings: DetectionSettings) -> Finding | None:
    """Tonight lies in a regime opened by a change point with enough nights behind it."""
    if not starts or len(clean) - starts[-1] < settings.confirm_nights:
        return None
    before, after = _before_change(clean, starts, settings), clean[starts[-1]:]
    base_values, values = _values(before), _values(after)
    baseline, value = statistics.median(base_values), statistics.median(values)
    change = relative_change(value, baseline)
    worse = _is_worse(change, metric)
    recent = after[-settings.confirm_nights:]
    if any(_is_worse(relative_change(n.value, baseline), metric) != worse
           or abs(relative_change(n.value, baseline)) < settings.min_effect / 2 for n in recent):
        return None                       # the change did not persist to tonight (an outlier night, say)
    if not worse and len(after) > settings.baseline_nights:
        return None                       # an improvement is news for K nights; a regression until accepted
    return Finding(kind="regression" if worse else "improvement", status="confirmed", metric=metric.name,
                   last_good_run=before[-1].run_id, first_bad_run=after[0].run_id, baseline_value=baseline,
                   value=value, change=change, p_value=u_test(values, base_values, _side(metric, worse)),
                   change_point=True, nights_since_change=len(after),
                   detail=f"change point {len(after)} night(s) ago, confirmed")


def _gate(tonight: Night, before: list[Night], metric: Metric, settings: DetectionSettings,
          first_bad: Night | None, scatter: list[Night]) -> Finding | None:
    """first_bad: where (b) placed a change not yet confirmed, if it did. scatter: the nights
    whose within-night spread measures the noise (the whole window: many degrees of freedom)."""
    if not before:
        return None
    base_values = _values(before)
    baseline = statistics.median(base_values)
    change = relative_change(tonight.value, baseline)
    variance = _noise_variance(scatter, baseline or 1.0)
    # the standard error of the difference of two medians (a median needs ~1.25x a mean's)
    standard_error = 1.25 * math.sqrt(variance / len(tonight.values) + variance / len(base_values))
    if abs(change) < max(settings.min_effect, settings.noise_z * standard_error):
        return None
    worse = _is_worse(change, metric)
    p = u_test(tonight.values, base_values, _side(metric, worse))
    if p >= settings.alpha:
        return None
    return Finding(kind="regression" if worse else "improvement", status="suspected", metric=metric.name,
                   last_good_run=before[-1].run_id, first_bad_run=(first_bad or tonight).run_id,
                   baseline_value=baseline, value=tonight.value, change=change,
                   p_value=p, change_point=first_bad is not None, nights_since_change=1,
                   detail=f"tonight's {len(tonight.values)} repeats vs {len(base_values)} from "
                          f"{len(before)} good night(s); awaiting confirmation")


def _noise_variance(nights: list[Night], scale: float) -> float:
    """Pooled within-night variance (immune to level shifts); with one repeat per night, the
    robust variance of night-to-night differences instead."""
    pooled = [(len(n.values) - 1, statistics.variance([v / scale for v in n.values]))
              for n in nights if len(n.values) > 1]
    dof = sum(d for d, _ in pooled)
    if dof >= 2:
        return sum(d * var for d, var in pooled) / dof
    medians = [n.value / scale for n in nights]
    diffs = [abs(b - a) for a, b in zip(medians, medians[1:])]
    if not diffs:
        return 0.0
    mad = statistics.median(diffs) / 0.6745                     # |diff| of two N(0, s2) has sd s*sqrt(2)
    return (mad / math.sqrt(2)) ** 2


def u_test(sample: list[float], reference: list[float], alternative: str) -> float:
    if len(sample) == 0 or len(reference) == 0:
        return 1.0
    if len(set(sample) | set(reference)) == 1:
        return 1.0                                               # all equal: no evidence either way
    from scipy.stats import mannwhitneyu  # here, as ruptures in change_points

    return float(mannwhitneyu(sample, reference, alternative=alternative).pvalue)


def relative_change(value: float, baseline: float) -> float:
    return value / baseline - 1.0 if baseline else 0.0


def _is_worse(change: float, metric: Metric) -> bool:
    return change < 0 if metric.direction == "higher" else change > 0


def _side(metric: Metric, worse: bool) -> str:
    """The U test's alternative for "the sample is worse (or better) than the reference"."""
    return "less" if (metric.direction == "higher") == worse else "greater"


def _values(nights: list[Night]) -> list[float]:
    return [v for n in nights for v in n.values]


def _before_change(clean: list[Night], starts: list[int], settings: DetectionSettings) -> list[Night]:
    """The last K nights of the regime before the newest change point."""
    start, previous = starts[-1], (starts[-2] if len(starts) > 1 else 0)
    return clean[max(previous, start - settings.baseline_nights):start]


# --- a verdict for every series, not only the ones with a finding

Verdict = Literal["regression", "improvement", "no change", "not enough history", "too noisy"]
VERDICTS: tuple[Verdict, ...] = ("regression", "improvement", "no change", "not enough history", "too noisy")


class SeriesVerdict(BaseModel):
    """What tonight's analysis says of one series and metric, a finding or not: silence is never ambiguous.
    `not enough history` means no change of any size could have been found with the nights there are:
    the U test of tonight's repeats against the baseline's cannot reach `alpha`."""

    series_id: str
    metric: str
    verdict: Verdict
    nights: int                              # usable nights, tonight included
    repeats: int                             # tonight's repeats
    nights_needed: int | None = None         # not enough history: nights (at tonight's repeats) the test needs
    detail: str = ""


def smallest_p_value(tonight: int, baseline: int) -> float:
    """The smallest one-sided p-value a Mann-Whitney U test of samples this size can give, 1 / C(n + m, n):
    every value of one sample beyond every value of the other (no ties)."""
    return 1.0 / math.comb(tonight + baseline, tonight) if tonight and baseline else 1.0


def nights_needed(repeats: int, alpha: float) -> int:
    """The fewest nights (tonight included), each of `repeats` repeats, whose test can reach `alpha`."""
    nights = 2
    while smallest_p_value(repeats, repeats * (nights - 1)) > alpha:
        nights += 1
    return nights


def series_verdict(series_id: str, nights: list[Night], metric: Metric,
                   settings: DetectionSettings | None = None) -> SeriesVerdict | None:
    """The verdict on tonight (the last night); None when tonight was excluded by an annotation."""
    settings = settings or DetectionSettings()
    history = usable_history(nights)[-settings.history_nights:]
    if not history or history[-1].run_id != nights[-1].run_id:
        return None
    tonight = history[-1]
    base = dict(series_id=series_id, metric=metric.name, nights=len(history), repeats=len(tonight.values))
    finding = analyze(nights, metric, settings)
    if finding is not None:
        verdict: Verdict = "too noisy" if finding.kind == "noisy" else finding.kind
        return SeriesVerdict(**base, verdict=verdict, detail=finding.detail)
    baseline = sum(len(n.values) for n in history[:-1][-settings.baseline_nights:])
    if smallest_p_value(len(tonight.values), baseline) > settings.alpha:
        needed = nights_needed(len(tonight.values), settings.alpha)
        window = ("" if needed - 1 <= settings.baseline_nights else
                  f", more than the {settings.baseline_nights}-night baseline: raise load.repeats")
        return SeriesVerdict(**base, verdict="not enough history", nights_needed=needed,
                             detail=f"{len(history)} of the {needed} nights of {len(tonight.values)} "
                                    f"repeat{'s' if len(tonight.values) != 1 else ''} "
                                    f"the U test needs at alpha {settings.alpha:g}{window}")
    return SeriesVerdict(**base, verdict="no change")
