"""Recall and false alarms of regression detection at the default settings, over many seeds.

Each history is replayed night by night (tonight's analysis as each night arrives), as the
nightly flow does. Reported per scenario: how many histories raised an alarm where they
should (recall within N nights of the change) or should not (false alarms per 1000 nights).

    python benchmarks/detection.py [--seeds 20] [--noise 0.03] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servebench.analysis.regression.synthetic import drift, history, outlier_night, replay, step  # noqa: E402

CHANGE_AT = 30


def nights_to_alarm(levels: list[float], noise: float, repeats: int, seed: int) -> int | None:
    alarms = [i for i in replay(history(levels, noise, repeats, seed), start=CHANGE_AT - 1).alarms() if i >= CHANGE_AT]
    return alarms[0] - CHANGE_AT + 1 if alarms else None


def recall_row(name: str, levels: list[float], args, within: int, repeats: int | None = None) -> list[str]:
    found = [nights_to_alarm(levels, args.noise, repeats or args.repeats, seed) for seed in range(args.seeds)]
    hits = [n for n in found if n is not None and n <= within]
    mean = statistics.fmean(n for n in found if n is not None) if any(n is not None for n in found) else float("nan")
    return [name, f"{repeats or args.repeats}", f"{len(hits)}/{args.seeds} within {within}", f"{mean:.1f}", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    rows = [
        recall_row("step -10%", step(CHANGE_AT + 6, CHANGE_AT, -0.10), args, within=3),
        recall_row("step -10%", step(CHANGE_AT + 6, CHANGE_AT, -0.10), args, within=3, repeats=1),
        recall_row("step -5%", step(CHANGE_AT + 10, CHANGE_AT, -0.05), args, within=5),
        recall_row("drift -0.5%/night", drift(CHANGE_AT + 40, CHANGE_AT, -0.005), args, within=20),
    ]
    alarmed_nights = histories = 0
    for seed in range(args.seeds):
        alarms = replay(history([1.0] * 200, args.noise, args.repeats, seed)).any_alarm()
        alarmed_nights += len(alarms)
        histories += bool(alarms)
    rows.append(["pure noise, 200 nights", str(args.repeats), f"{histories}/{args.seeds} histories alarmed",
                 "", f"{1000 * alarmed_nights / (199 * args.seeds):.2f}"])
    confirmed = suspected = 0
    for seed in range(args.seeds):
        found = replay(history(outlier_night(CHANGE_AT + 10, CHANGE_AT, -0.15), args.noise, args.repeats, seed),
                       start=CHANGE_AT - 1)
        confirmed += bool(found.alarms(status=("confirmed",)) or found.alarms(kind="improvement"))
        suspected += found.alarms(status=("suspected",)) == [CHANGE_AT]
    rows.append(["one outlier night -15%", str(args.repeats),
                 f"{suspected}/{args.seeds} suspected that night", "", f"{confirmed}/{args.seeds} confirmed"])
    repeat_alarms = sum(bool(replay(history([1.0] * 40, args.noise, args.repeats, seed, {CHANGE_AT: 0.6}),
                                    start=CHANGE_AT - 1).any_alarm()) for seed in range(args.seeds))
    rows.append(["one outlier repeat -40%", str(args.repeats), f"{repeat_alarms}/{args.seeds} alarmed", "", ""])
    header = ["scenario", "repeats", "result", "mean nights to alarm", "false alarms / 1000 nights"]
    print(f"noise {args.noise:.0%} per repeat, default DetectionSettings, {args.seeds} seeds\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
