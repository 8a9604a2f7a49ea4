"""What a workload is, as data: the campaign's `load.workload` block and `servebench load --workload`
take the same models, so a workload means the same on the command line and in a campaign.

Kinds:
- synthetic: random token ids, input and output lengths from distributions (distributions.py);
- dataset: a local ShareGPT JSON or JSONL file of prompts (workload.py reads them);
- shared-prefix: G groups of requests, each group's prompts starting with the same P tokens;
- trace: a Mooncake JSONL or Azure-style CSV replayed on its own schedule (traces.py);
- sessions: multi-turn conversations, each turn's prompt the conversation so far.

Data files are read when the block is validated, so a malformed line, a trace running backwards
or an empty file is refused, naming the file and line, before a server is started or a request sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from servebench.load.distributions import Length, LengthSpec, WorkloadError, data_path, fixed, recorded

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from servebench.load.traces import TraceRow

NAME_PATTERN = r"^[A-Za-z0-9_-]+$"


class WorkloadBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, min_length=1, max_length=40, pattern=NAME_PATTERN, description=(
        "The workload's name in cell keys (`tp1.<name>.c4.r0`) and reports; default: its kind."))

    @property
    def label(self) -> str:
        return self.name or self.default_name

    @property
    def default_name(self) -> str:
        return str(getattr(self, "kind"))

    def upper_input(self) -> int | None:
        """The longest prompt this can send, where known before drawing (None: unknown)."""
        return None

    def upper_output(self) -> int | None:
        return None

    def identity(self) -> str:
        """The workload as its cells' series know it: every field, canonical JSON."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


class SyntheticWorkload(WorkloadBase):
    """Random token-id prompts whose lengths, and the answers' lengths, follow distributions."""

    kind: Literal["synthetic"]
    input: Length = Field(default_factory=lambda: fixed(64), description="Prompt tokens.")
    output: Length = Field(default_factory=lambda: fixed(32), description="Answer tokens.")

    def upper_input(self) -> int | None:
        return self.input.upper_bound

    def upper_output(self) -> int | None:
        return self.output.upper_bound


class DatasetWorkload(WorkloadBase):
    """Prompts from a local file: ShareGPT JSON (the first human turn is the prompt, the first reply's
    length the output length) or JSONL (`{"prompt": ..., "output_len": ...}`, `{"prompt_ids": [...]}`
    or `{"messages": [...]}`). Text is counted with the model's tokenizer."""

    kind: Literal["dataset"]
    format: Literal["sharegpt", "jsonl"] = Field(description="'sharegpt': a ShareGPT JSON file; 'jsonl': one "
                                                 "JSON object a line (`prompt`, `prompt_ids` or `messages`).")
    path: str = Field(min_length=1, description="The file: absolute, or relative to the campaign file's "
                      "directory; read and checked when the campaign is loaded.")
    output: Length | None = Field(None, description="Answer lengths instead of the file's.")

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return data_path(value, info)

    @model_validator(mode="after")
    def _readable(self, info: ValidationInfo) -> "DatasetWorkload":
        from servebench.load.datasets import check_dataset

        if not recorded(info):
            check_dataset(Path(self.path), self.format)
        return self

    def upper_output(self) -> int | None:
        return self.output.upper_bound if self.output is not None else None


class SharedPrefixWorkload(WorkloadBase):
    """`groups` groups, each with a shared prefix of `prefix_len` random tokens, every request then
    `suffix_len` tokens of its own: what a prefix cache can reuse is known exactly."""

    kind: Literal["shared-prefix"]
    groups: int = Field(ge=1, description="G: groups, each with its own prefix.")
    prefix_len: int = Field(ge=1, description="P: tokens every request of a group starts with.")
    suffix_len: Length = Field(default_factory=lambda: fixed(16), description="Q: each request's own tokens after "
                               "the prefix.")
    output: Length = Field(default_factory=lambda: fixed(32), description="Answer tokens.")
    order: Literal["interleaved", "bursty"] = Field("interleaved", description=(
        "'interleaved': request i is of group i mod G; 'bursty': `burst` requests of one group in a row, "
        "then the next group's."))
    burst: int = Field(8, ge=1, description="bursty: requests of one group in a row.")

    @property
    def default_name(self) -> str:
        return "prefix"

    def upper_input(self) -> int | None:
        suffix = self.suffix_len.upper_bound
        return None if suffix is None else self.prefix_len + suffix

    def upper_output(self) -> int | None:
        return self.output.upper_bound

    def group(self, index: int) -> int:
        if self.order == "interleaved":
            return index % self.groups
        return (index // self.burst) % self.groups


class TraceWorkload(WorkloadBase):
    """A trace replayed on its own schedule: Mooncake JSONL (`timestamp` ms, `input_length`,
    `output_length`, `hash_ids`: equal hash ids are equal blocks of `block_size` tokens) or an
    Azure-style CSV (TIMESTAMP, ContextTokens, GeneratedTokens)."""

    kind: Literal["trace"]
    format: Literal["mooncake", "azure"] = Field(description="'mooncake': Mooncake JSONL; 'azure': an "
                                                 "Azure-style CSV (TIMESTAMP, ContextTokens, GeneratedTokens).")
    path: str = Field(min_length=1, description="The trace file: absolute, or relative to the campaign file's "
                      "directory; read and checked when the campaign is loaded.")
    time_scale: float = Field(1.0, gt=0, description="Offsets are the trace's times this: 0.1 replays 10x "
                              "faster. With a rate (`--rate`, a campaign's `rates`), the rate decides instead.")
    start_s: float = Field(0.0, ge=0, description="Window: trace seconds after its first request to start at.")
    duration_s: float | None = Field(None, gt=0, description="Window: trace seconds from the start (default: all).")
    max_requests: int | None = Field(None, ge=1, description="At most this many requests of the window.")
    block_size: int = Field(512, ge=1, description="mooncake: tokens per hash id.")
    _rows: list[TraceRow] = PrivateAttr(default_factory=list)

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return data_path(value, info)

    @model_validator(mode="after")
    def _read(self, info: ValidationInfo) -> "TraceWorkload":
        from servebench.load.traces import read_trace

        if recorded(info):  # a record of what ran: its rows are not read again (`window()` is empty)
            return self
        self._rows = read_trace(Path(self.path), self.format)
        if not self.window():
            raise ValueError(f"{self.path}: no request in the window (start_s {self.start_s:g}, duration_s "
                             f"{self.duration_s})")
        return self

    def window(self) -> list[TraceRow]:
        """The trace's rows in the window, at most max_requests, times from the window's start."""
        from servebench.load.traces import in_window

        return in_window(self._rows, self.start_s, self.duration_s, self.max_requests)

    def own_rate(self) -> float | None:
        """The window's mean arrival rate as replayed (time_scale applied), to 3 significant digits; None
        for a window of one request or of requests all at one time."""
        from servebench.load.traces import replay_offsets

        offsets = replay_offsets(self.window(), self.time_scale)
        if len(offsets) < 2 or offsets[-1] <= 0:
            return None
        return float(f"{(len(offsets) - 1) / offsets[-1]:.3g}")

    def upper_input(self) -> int | None:
        return max(row.input_len for row in self.window())

    def upper_output(self) -> int | None:
        return max(row.output_len for row in self.window())


class SessionsWorkload(WorkloadBase):
    """`sessions` conversations of `turns` turns: each turn's prompt is the conversation so far (every
    earlier prompt and answer, as token ids) and a new user message; a session's next turn is sent
    when its answer is complete and a think time has passed. `clients` conversations run at once
    (default: all). An earlier answer enters the next prompt as filler token ids of that answer's
    asked length (seeded), not as the tokens the server generated: prompt lengths are exact, and a
    prefix cache can reuse the earlier prompts but not the answers."""

    kind: Literal["sessions"]
    sessions: int = Field(ge=1, description="S: conversations.")
    turns: int = Field(ge=1, description="T: turns of each conversation.")
    first_input: Length = Field(default_factory=lambda: fixed(64), description="The first user message's tokens.")
    turn_input: Length = Field(default_factory=lambda: fixed(32), description="Every later user message's tokens.")
    output: Length = Field(default_factory=lambda: fixed(32), description="Every answer's tokens.")
    think_s: float = Field(0.0, ge=0, description="Seconds between an answer and the session's next turn.")
    think: Literal["fixed", "exponential"] = Field("fixed", description=(
        "'fixed': think_s each time; 'exponential': drawn with mean think_s (seeded), at most 10x it."))

    def upper_input(self) -> int | None:
        first, turn, answer = self.first_input.upper_bound, self.turn_input.upper_bound, self.output.upper_bound
        if first is None or turn is None or answer is None:
            return None
        return first + (self.turns - 1) * (answer + turn)

    def upper_output(self) -> int | None:
        return self.output.upper_bound

    def think_bound_s(self) -> float:
        return self.think_s * (10 if self.think == "exponential" else 1)


AnyWorkload = SyntheticWorkload | DatasetWorkload | SharedPrefixWorkload | TraceWorkload | SessionsWorkload
WorkloadSpec = Annotated[AnyWorkload, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[AnyWorkload] = TypeAdapter(WorkloadSpec)
KINDS = ("synthetic", "dataset", "shared-prefix", "trace", "sessions")


def workload_from_data(data: Any, base_dir: Path | None = None) -> WorkloadSpec:
    """A workload block (a mapping) -> its model; WorkloadError naming the field otherwise."""
    try:
        return _ADAPTER.validate_python(data, context={"base_dir": base_dir} if base_dir else None)
    except ValidationError as exc:
        raise WorkloadError("; ".join(_problem(err) for err in exc.errors())) from None


def parse_workload_option(text: str) -> WorkloadSpec:
    """`--workload`: a YAML or JSON file holding the block, or the block itself inline
    (`{kind: shared-prefix, groups: 2, prefix_len: 256}`); a file's relative data paths are its own."""
    import yaml  # here: a client node's generator tree has no yaml, and takes the block as JSON

    path = Path(text).expanduser()
    source, base = "--workload", None
    if not text.lstrip().startswith("{") and path.is_file():
        source, base = f"--workload {path}", path.parent.absolute()
        text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        for mark in (getattr(exc, "context_mark", None), getattr(exc, "problem_mark", None)):
            if mark is not None:  # PyYAML names a string "<unicode string>"
                mark.name = str(path) if base else "--workload"
        raise WorkloadError(f"{source}: not YAML or JSON: {exc}") from None
    if isinstance(data, str) and path.suffix in (".yaml", ".yml", ".json"):
        raise WorkloadError(f"{source}: no such file: {path}")
    if not isinstance(data, dict):
        raise WorkloadError(f"{source}: give a mapping with 'kind' ({', '.join(KINDS)}), or a file holding one")
    try:
        return workload_from_data(data, base)
    except WorkloadError as exc:
        raise WorkloadError(f"{source}: {exc}") from None


def _problem(err: ErrorDetails) -> str:
    """'input.max: ...': the field as written (pydantic's union tags and validator names left out)."""
    loc = ".".join(str(part) for part in err["loc"][1:] if not str(part).startswith("function-"))
    message = err["msg"].removeprefix("Value error, ")
    return f"{loc}: {message}" if loc else message


def length_label(spec: LengthSpec | None) -> str:
    return "-" if spec is None else spec.label
