"""The campaign file's reference, made from the models that read it: `servebench schema` prints the JSON
Schema (an editor can validate a campaign with it) or this page as Markdown, and docs/campaign-reference.md
is that Markdown (tests/unit/test_campaign_reference.py fails when it is stale). The `engine:` and `provider:`
blocks are each engine's and provider's own model, chosen by `kind`, so both come from the registries."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from servebench.config.campaign import Campaign
from servebench.engines import engine_kinds, get_engine
from servebench.providers import get_provider_class, provider_kinds

TITLE = "# The campaign file, field by field"
INTRO = (
    "A campaign is one YAML file. This page is generated from the models that read it "
    "(`servebench schema --format markdown`; `servebench schema` prints the JSON Schema). "
    "Fields without a default are required. The `engine:` and `provider:` blocks depend on their `kind`."
)


def block_models() -> dict[str, dict[str, type[BaseModel]]]:
    """The models of the blocks chosen by `kind`: each registered engine's and provider's."""
    return {
        "engine": {kind: get_engine(kind).spec_model for kind in engine_kinds()},
        "provider": {kind: get_provider_class(kind).spec_model for kind in provider_kinds()},
    }


def campaign_json_schema() -> dict[str, Any]:
    """Campaign's JSON Schema with `engine`, `engines` and `provider` as one of their kinds' models."""
    schema = Campaign.model_json_schema()
    definitions = schema.setdefault("$defs", {})
    choices: dict[str, list[dict[str, str]]] = {}
    for block, models in block_models().items():
        choices[block] = []
        for model in models.values():
            model_schema = model.model_json_schema(ref_template="#/$defs/{model}")
            definitions.update(model_schema.pop("$defs", {}))
            definitions[model.__name__] = model_schema
            choices[block].append({"$ref": f"#/$defs/{model.__name__}"})
    properties = schema["properties"]
    properties["engine"] = {"oneOf": choices["engine"], "description": "The engine that serves the modes"}
    properties["engines"] = {**properties.get("engines", {}), "type": "array", "items": {"oneOf": choices["engine"]}}
    properties["engines"].pop("$ref", None)
    properties["provider"] = {"oneOf": choices["provider"], "description": "Where the nodes come from"}
    return schema


def reference_markdown() -> str:
    """The reference page: Campaign's fields, then every model they lead to, then the blocks by kind."""
    sections = [TITLE, "", INTRO, ""]
    seen: set[type[BaseModel]] = set()
    order = _models_under(Campaign, seen)
    for model in order:
        sections += _model_section(model, heading="##")
    for block, models in block_models().items():
        sections += [f"## `{block}:` by kind", ""]
        for kind, model in models.items():
            sections += _model_section(model, heading="###", title=f"`{block}: {{kind: {kind}}}` ({model.__name__})")
            for nested in _models_under(model, seen)[1:]:
                sections += _model_section(nested, heading="###")
    return "\n".join(sections).rstrip() + "\n"


def undocumented_fields() -> list[str]:
    """Every field of every model the reference shows that has no description."""
    seen: set[type[BaseModel]] = set()
    models = _models_under(Campaign, seen)
    for block_kinds in block_models().values():
        for model in block_kinds.values():
            models += _models_under(model, seen)
    return [f"{model.__name__}.{name}" for model in models for name, field in _own_fields(model).items()
            if not field.description and name != "kind"]


def schema_text(form: str) -> str:
    return reference_markdown() if form == "markdown" else json.dumps(campaign_json_schema(), indent=2) + "\n"


def _models_under(root: type[BaseModel], seen: set[type[BaseModel]]) -> list[type[BaseModel]]:
    """`root` and the models its fields lead to, depth first, each once (already `seen` ones left out)."""
    if root in seen:
        return []
    seen.add(root)
    found = [root]
    for field in root.model_fields.values():
        for model in _models_in(field.annotation):
            found += _models_under(model, seen)
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [] if annotation.__name__.endswith("SpecBase") else [annotation]
    return [model for argument in typing.get_args(annotation) for model in _models_in(argument)]


def _own_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return dict(model.model_fields)


def _model_section(model: type[BaseModel], heading: str, title: str | None = None) -> list[str]:
    doc = " ".join((model.__doc__ or "").split())
    lines = [f"{heading} {title or model.__name__}", ""]
    if doc:
        lines += [doc, ""]
    lines += ["| field | type | default | what |", "| --- | --- | --- | --- |"]
    for name, field in _own_fields(model).items():
        what = " ".join((field.description or "").split()).replace("|", "\\|")
        lines.append(f"| `{field.alias or name}` | {_type_text(field.annotation)} | {_default_text(field)} | {what} |")
    return lines + [""]


def _type_text(annotation: Any) -> str:
    text = _type_name(annotation)
    return f"`{text}`".replace("|", "\\|")


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(arguments[0])
    if origin is typing.Literal:
        return " or ".join(json.dumps(value) for value in arguments)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(argument) for argument in arguments)
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type_name(arguments[0])}" if arguments else "list"
    if origin is dict:
        return f"map of {_type_name(arguments[0])} to {_type_name(arguments[1])}" if arguments else "map"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and annotation.__name__.endswith("SpecBase"):
        block = "engine" if "Engine" in annotation.__name__ else "provider"
        return f"a {block} block (by kind, below)"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]  # factories here take no argument
        except TypeError:
            return "computed"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "its defaults"
    text = json.dumps(value, default=str)
    return f"`{text}`".replace("|", "\\|") if len(text) <= 40 else "see below"
