"""Campaign files: YAML -> the validated `Campaign`, or every problem with its place.

Everything a campaign needs is checked before a node is touched: unknown keys, wrong
types, an unknown engine or provider kind, executors the engine does not have, and modes
the nodes or the model cannot hold (`servebench.planning.feasibility`). Every problem
names the file, the line and the field, because a campaign that fails after an hour of
engine build for a typo is the worst kind of failure.

The `engine:` and `provider:` blocks are validated by the models their kinds register:
the kind is read first, then the whole file is validated against a `Campaign` whose two
fields have those models, so their errors carry lines like any other.
"""

from __future__ import annotations

import difflib
import functools
import types
from pathlib import Path
from typing import Annotated, Any, Iterable, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model
from pydantic_core import ErrorDetails

from servebench.config.campaign import Campaign, EngineSpecBase
from servebench.engines import default_engine_kind, engine_kinds, get_engine
from servebench.paths import shipped
from servebench.planning.feasibility import check_feasibility
from servebench.providers import Provider, get_provider_class, provider_kinds


class SpecProblem(BaseModel):
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field or '(top level)'}: {self.message}"


class SpecError(Exception):
    """A campaign file that cannot run; carries every problem found, each with its place."""

    def __init__(self, problems: list[SpecProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class NoSuchCampaign(SpecError):
    """A campaign named on the command line that is neither a file nor a shipped campaign: one line,
    with the closest names, rather than every shipped campaign."""

    def __init__(self, given: Path, closest: list[str]):
        hint = suggestion(closest)
        shipped_names = ", ".join(sorted(path.stem for path in shipped_campaigns()))
        self.message = f"no campaign '{given}'" + (f": {hint}" if hint else
                                                   f": no such file, nor a shipped campaign ({shipped_names})")
        super().__init__([SpecProblem(file=str(given), line=None, field="", message=self.message)])

    def __str__(self) -> str:
        return self.message


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    """'did you mean X?' (or 'X or Y?') for the known words closest to a mistyped one; None if none is close."""
    return suggestion(difflib.get_close_matches(word, sorted(known), n=3))


def suggestion(closest: list[str]) -> str | None:
    return f"did you mean {' or '.join(closest)}?" if closest else None


def campaign_path(given: str | Path) -> Path:
    """The campaign file a command line names: a path, else a campaign shipped with servebench by its
    name (`smoke`, `smoke.yaml`; `servebench campaigns` lists them), so an installed wheel runs one
    from any directory. A path that exists always wins."""
    path = Path(given)
    if path.exists() or path.parent != Path("."):
        return path
    shipped_file = shipped("campaigns") / (path.name if path.suffix == ".yaml" else f"{path.name}.yaml")
    return shipped_file if shipped_file.is_file() else path


def shipped_campaigns() -> list[Path]:
    """The campaigns shipped with servebench (the checkout's campaigns/, or the wheel's copy)."""
    return sorted(shipped("campaigns").glob("*.yaml"))


def load_campaign(path: str | Path, host_cpus: set[int] | None = None) -> Campaign:
    """Parse, validate and check a campaign file; raise SpecError naming file, line and field.

    `host_cpus`: the CPUs of the host the load generator runs on (default: as the campaign's
    provider reads them)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise NoSuchCampaign(path, _closest_campaigns(path)) from None
    except OSError as exc:
        names = ", ".join(p.stem for p in shipped_campaigns())
        raise SpecError([SpecProblem(file=str(path), line=None, field="",
                                     message=f"{exc.strerror or exc} (a shipped campaign is named without a "
                                             f"directory: {names})")]) from exc
    return parse_campaign(text, source=str(path), base_dir=path.parent, host_cpus=host_cpus)


def _closest_campaigns(path: Path) -> list[str]:
    """What a missing campaign file may have meant: for a bare name the closest shipped campaigns,
    else the closest campaign files in its directory (matched by name, shown as paths)."""
    bare = path.parent == Path(".")
    files = shipped_campaigns() if bare else sorted(path.parent.glob("*.yaml")) if path.parent.is_dir() else []
    shown = {file.stem: file.stem if bare else str(file) for file in files}
    return [shown[stem] for stem in difflib.get_close_matches(path.stem, list(shown), n=3)]


def parse_campaign(text: str, source: str = "<string>", base_dir: Path | None = None,
                   host_cpus: set[int] | None = None) -> Campaign:
    lines, data = _load_yaml_with_lines(text, source)
    if not isinstance(data, dict):
        raise SpecError([SpecProblem(file=source, line=1, field="", message="a campaign is a YAML mapping")])
    engine_kind, provider_kind, more = _kinds(data, lines, source)
    _fill_default_executors(data, engine_kind)
    model = campaign_model(engine_kind, provider_kind, more)
    try:
        campaign = model.model_validate(
            data, context={"base_dir": base_dir})  # a workload's data files are relative to the campaign file
    except ValidationError as exc:
        raise SpecError([_problem_from_error(err, data, lines, source, model) for err in exc.errors()]) from None
    provider: type[Provider] = get_provider_class(provider_kind)
    host = provider.host_cpus() if host_cpus is None else host_cpus
    problems = [
        SpecProblem(file=source, line=_line_for(path, lines), field=_dotted(path), message=message)
        for path, message in check_feasibility(campaign, get_engine, provider, base_dir, host)
    ]
    if problems:
        raise SpecError(problems)
    return campaign


@functools.cache
def campaign_model(engine_kind: str, provider_kind: str, more_engines: tuple[str, ...] = ()) -> type[Campaign]:
    """`Campaign` with the `engine`, `engines` and `provider` fields of these kinds' own models."""
    engine_spec = get_engine(engine_kind).spec_model
    more = [get_engine(kind).spec_model for kind in more_engines]
    item = more[0] if len(more) == 1 else Annotated[Union[tuple(more)], Field(discriminator="kind")] if more \
        else EngineSpecBase
    provider_class: type[Provider] = get_provider_class(provider_kind)
    return create_model("Campaign", __base__=Campaign,
                        engine=(engine_spec, Field(default_factory=engine_spec)),
                        # `item` is a type made here at runtime, which mypy cannot read as an annotation
                        engines=(list[item], Field(default_factory=list)),  # type: ignore[valid-type]
                        provider=(provider_class.spec_model, ...))


def _kinds(data: dict, lines: dict[tuple, int], source: str) -> tuple[str, str, tuple[str, ...]]:
    """The engine and provider kinds the file names (engine: the first registered when left out), and
    the kinds of its further `engines:`."""
    problems = []
    engine = data.get("engine")
    if not isinstance(engine, dict):
        engine = {}
    engine_kind = engine.get("kind", default_engine_kind())
    if engine_kind not in engine_kinds():
        problems.append(SpecProblem(file=source, line=_line_for(("engine", "kind"), lines), field="engine.kind",
                                    message=f"unknown engine {engine_kind!r}; known: {', '.join(engine_kinds())}"))
    more: list[str] = []
    for index, block in enumerate(data.get("engines") or [] if isinstance(data.get("engines"), list) else []):
        kind = block.get("kind") if isinstance(block, dict) else None
        if kind not in engine_kinds():
            problems.append(SpecProblem(file=source, line=_line_for(("engines", index), lines),
                                        field=f"engines.{index}.kind", message=f"give an engine kind, one of "
                                        f"{', '.join(engine_kinds())} (got {kind!r})"))
        elif kind not in more:
            more.append(kind)
    provider = data.get("provider")
    if not isinstance(provider, dict):
        provider = {}
    provider_kind = provider.get("kind", "local")
    if provider_kind not in provider_kinds():
        problems.append(SpecProblem(file=source, line=_line_for(("provider", "kind"), lines), field="provider.kind",
                                    message=f"unknown provider {provider_kind!r}; known: "
                                            f"{', '.join(provider_kinds())}"))
    if problems:
        raise SpecError(problems)
    return str(engine_kind), str(provider_kind), tuple(more)


def _fill_default_executors(data: dict, engine_kind: str) -> None:
    """A mode without `executor` gets its engine's first: normalized specs (and hashes) say it."""
    for mode in data.get("modes") or []:
        if isinstance(mode, dict):
            kind = mode.get("engine") or engine_kind
            if kind in engine_kinds():
                mode.setdefault("executor", get_engine(kind).executors[0])


def _load_yaml_with_lines(text: str, source: str) -> tuple[dict[tuple, int], Any]:
    """YAML data plus the line of every key and list item, keyed by its path."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        for each in (getattr(exc, "context_mark", None), mark):  # PyYAML names a string "<unicode string>"
            if each is not None:
                each.name = source
        raise SpecError([SpecProblem(file=source, line=line, field="", message=f"invalid YAML: {exc}")]) from None
    if root is None:
        raise SpecError([SpecProblem(file=source, line=1, field="", message="the file is empty")])
    lines: dict[tuple, int] = {(): root.start_mark.line + 1}
    duplicates: list[SpecProblem] = []
    _walk(root, (), lines, duplicates, source)
    if duplicates:
        raise SpecError(duplicates)
    return lines, yaml.safe_load(text)


def _walk(node: yaml.Node, path: tuple, lines: dict[tuple, int], dups: list[SpecProblem], source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            child = path + (key,)
            if key in seen:
                dups.append(SpecProblem(file=source, line=key_node.start_mark.line + 1, field=_dotted(child),
                                        message="duplicate key"))
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines, dups, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = path + (index,)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines, dups, source)


def _problem_from_error(err: ErrorDetails, data: Any, lines: dict[tuple, int], source: str,
                        model: type[BaseModel]) -> SpecProblem:
    path = _user_path(err["loc"], data, keep_missing_last=err["type"] == "missing")
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        hint = did_you_mean(str(err["loc"][-1]), known_keys(model, err["loc"][:-1]))
        message = "unknown key" + (f"; {hint}" if hint else "")
    elif err["type"] == "missing":
        message = "required field is missing"
    elif err["type"] != "value_error" and not isinstance(err.get("input"), (dict, list)) and "input" in err:
        message = f"{message} (got {err['input']!r})"
    return SpecProblem(file=source, line=_line_for(path, lines), field=_dotted(path), message=message)


def known_keys(model: type[BaseModel], loc: tuple) -> set[str]:
    """The keys the model at `loc` (a pydantic error's location under `model`) takes: what an unknown
    key there may have meant. Follows fields, list items, mapping values and union members (pydantic's
    tag in `loc` picks the member: a `Tag`, a `kind` value or a class name)."""
    found = _members(model)
    for part in loc:
        step: list[tuple[Any, set[str]]] = []
        for candidate, tags in found:
            if isinstance(part, str) and part.startswith("function-"):
                step.append((candidate, tags))  # a validator's entry, not a key of the file
            elif _is_model(candidate) and isinstance(part, str) and part in candidate.model_fields:
                step += _members(candidate.model_fields[part].annotation)
            elif part in tags:
                step.append((candidate, set()))
            elif isinstance(part, int) and get_origin(candidate) in (list, tuple, set, frozenset):
                step += [m for arg in get_args(candidate) if arg is not Ellipsis for m in _members(arg)]
            elif isinstance(part, str) and get_origin(candidate) is dict and len(get_args(candidate)) == 2:
                step += _members(get_args(candidate)[1])
        found = step
    return {key for candidate, _ in found if _is_model(candidate)
            for name, field in candidate.model_fields.items() for key in (name, field.alias) if key}


def _members(annotation: Any, tags: frozenset[str] = frozenset()) -> list[tuple[Any, set[str]]]:
    """A type without its Annotated metadata and, for a union (an optional one too), each member; each
    with the names pydantic may put in an error's location for it as a union member."""
    if get_origin(annotation) is Annotated:
        kind, *metadata = get_args(annotation)
        return _members(kind, tags | {m.tag for m in metadata if isinstance(getattr(m, "tag", None), str)})
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg, tags)]
    if _is_model(annotation):
        field = annotation.model_fields.get("kind")
        kinds = {str(v) for v in get_args(field.annotation)} if field is not None else set()
        return [(annotation, {*tags, annotation.__name__, *kinds})]
    return [(annotation, set(tags))]


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _user_path(loc: tuple, data: Any, keep_missing_last: bool) -> tuple:
    """The error's location as the user wrote it: union tags pydantic adds to `loc` are dropped."""
    path: list = []
    for position, part in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        elif not (last and keep_missing_last):
            continue  # a tag such as 'local' or 'generated', not a key of the file
        path.append(part)
    return tuple(path)


def _line_for(path: tuple, lines: dict[tuple, int]) -> int | None:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def _dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
