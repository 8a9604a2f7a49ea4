"""Length distributions for a workload's input and output tokens.

A request's lengths are drawn from a seeded generator of its own (its index and the data seed),
so the same seed sends the same requests whatever the arrival process, the rate or the number
of requests, and a request's lengths never depend on which other requests were drawn before.

normal and lognormal take the mean and standard deviation of the lengths themselves (not of
their logarithm: a lognormal with mean 256 and stdev 128 has lengths averaging 256), then
`min`/`max` clamp each draw; empirical draws from the lengths listed in a file.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)


class WorkloadError(ValueError):
    """Workload input that cannot be sent: the message names the file and line, or the field."""


def _fixed_from_int(value: Any) -> Any:
    """`input: 256` is `input: {dist: fixed, value: 256}`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"dist": "fixed", "value": value}
    return value


class LengthSpec(BaseModel):
    """How many tokens: fixed, uniform between min and max, normal or lognormal (mean, stdev of the
    lengths) clamped to [min, max], or empirical (the lengths listed in `file`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: Literal["fixed", "uniform", "normal", "lognormal", "empirical"] = Field(description=(
        "How lengths (tokens) are drawn: 'fixed' (`value`), 'uniform' (`min` to `max`), 'normal' or 'lognormal' "
        "(`mean`, `stdev`), 'empirical' (the lengths in `file`)."))
    value: int | None = Field(None, ge=1, description="fixed: the length.")
    mean: float | None = Field(None, gt=0, description="normal, lognormal: the mean length.")
    stdev: float | None = Field(None, ge=0, description="normal, lognormal: the lengths' standard deviation.")
    min: int | None = Field(None, ge=1, description="Every draw is at least this (uniform: the lowest).")
    max: int | None = Field(None, ge=1, description="Every draw is at most this (uniform: the highest).")
    file: str | None = Field(None, description="empirical: one length a line, optionally followed by its weight "
                             "('512' or '512 3' or '512,3'); '#' starts a comment.")
    _empirical: tuple[list[int], list[float]] | None = PrivateAttr(None)

    @field_validator("file")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else data_path(value, info)

    @model_validator(mode="after")
    def _parameters(self, info: ValidationInfo) -> "LengthSpec":
        need = {"fixed": ("value",), "uniform": ("min", "max"), "normal": ("mean", "stdev"),
                "lognormal": ("mean", "stdev"), "empirical": ("file",)}[self.dist]
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            raise ValueError(f"dist {self.dist} needs {' and '.join(missing)}")
        unused = [name for name in ("value", "mean", "stdev", "file")
                  if name not in need and getattr(self, name) is not None]
        if unused:
            raise ValueError(f"dist {self.dist} takes no {', '.join(unused)}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) exceeds max ({self.max})")
        if self.dist == "empirical" and not recorded(info):
            assert self.file is not None  # checked just above: empirical needs file
            self._empirical = read_empirical(Path(self.file))
        return self

    def sample(self, rng: random.Random) -> int:
        """One length, clamped to [min, max] and at least 1."""
        # the parameters each dist reads are set: `_parameters` rejects a spec without them
        if self.dist == "fixed":
            assert self.value is not None
            drawn: float = self.value
        elif self.dist == "uniform":
            assert self.min is not None and self.max is not None
            drawn = rng.randint(self.min, self.max)
        elif self.dist == "normal":
            assert self.mean is not None and self.stdev is not None
            drawn = rng.gauss(self.mean, self.stdev)
        elif self.dist == "lognormal":
            assert self.mean is not None and self.stdev is not None
            mu, sigma = lognormal_parameters(self.mean, self.stdev)
            drawn = rng.lognormvariate(mu, sigma)
        else:
            assert self._empirical is not None
            values, weights = self._empirical
            drawn = rng.choices(values, weights)[0]
        return self.clamp(round(drawn))

    def clamp(self, length: int) -> int:
        if self.min is not None:
            length = max(length, self.min)
        if self.max is not None:
            length = min(length, self.max)
        return max(length, 1)

    @property
    def upper_bound(self) -> int | None:
        """The longest length this can draw (None: unbounded, a normal or lognormal without max)."""
        # the parameters each dist reads are set: `_parameters` rejects a spec without them
        if self.dist == "fixed":
            assert self.value is not None
            return self.clamp(self.value)
        if self.dist == "empirical":
            assert self._empirical is not None
            return self.clamp(max(self._empirical[0]))
        return self.max

    @property
    def label(self) -> str:
        """'256', 'uniform128-512', 'lognormal256s128': what a cell's workload says about its lengths."""
        if self.dist == "fixed":
            return str(self.value)
        if self.dist == "uniform":
            return f"uniform{self.min}-{self.max}"
        if self.dist == "empirical":
            assert self.file is not None  # `_parameters`: empirical needs file
            return f"empirical:{Path(self.file).name}"
        return f"{self.dist}{self.mean:g}s{self.stdev:g}"


Length = Annotated[LengthSpec, BeforeValidator(_fixed_from_int)]


RECORDED: dict[str, Any] = {"recorded": True}


def recorded(info: ValidationInfo | None) -> bool:
    """Whether a block is read back as a record of what ran (validation context RECORDED: a result
    file's config), not given to be run: its data files are then not read again, since they may
    have moved or changed since the run, and reading a result must not depend on them."""
    return info is not None and bool((info.context or {}).get("recorded"))


def data_path(value: str, info: ValidationInfo) -> str:
    """A data file's path: a relative one is taken from the campaign file's directory (the validation
    context's `base_dir`, which the campaign loader passes), else from the working directory."""
    path = Path(value).expanduser()
    base = (info.context or {}).get("base_dir") if info is not None else None
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return str(path.absolute()) if not path.is_absolute() else str(path)


def fixed(value: int) -> LengthSpec:
    return LengthSpec(dist="fixed", value=value)


def lognormal_parameters(mean: float, stdev: float) -> tuple[float, float]:
    """(mu, sigma) of the underlying normal for lengths of this mean and standard deviation."""
    sigma2 = math.log1p((stdev / mean) ** 2)
    return math.log(mean) - sigma2 / 2, math.sqrt(sigma2)


def read_empirical(path: Path) -> tuple[list[int], list[float]]:
    """Lengths and weights from a file: 'LENGTH [WEIGHT]' a line; errors name the file and line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    values: list[int] = []
    weights: list[float] = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].replace(",", " ").split()
        if not text:
            continue
        try:
            length = int(text[0])
            weight = float(text[1]) if len(text) > 1 else 1.0
        except ValueError:
            raise ValueError(f"{path}:{number}: expected 'LENGTH [WEIGHT]', got {line.strip()!r}") from None
        if length < 1 or weight < 0 or len(text) > 2 or not math.isfinite(weight):
            raise ValueError(f"{path}:{number}: a length is a positive integer, a weight a non-negative number: "
                             f"{line.strip()!r}")
        values.append(length)
        weights.append(weight)
    if not values or not any(weights):
        raise ValueError(f"{path}: no lengths (one positive integer a line)")
    return values, weights
