"""The campaign file's reference: `servebench schema` and docs/campaign-reference.md come from the same
models, agree, and document every field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from servebench.campaign.field_docs import reference_markdown, undocumented_fields
from servebench.plugins import load_plugins

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "servebench schema --format markdown > docs/campaign-reference.md"


def test_the_reference_page_is_what_the_models_say():
    load_plugins()
    assert (ROOT / "docs" / "campaign-reference.md").read_text() == reference_markdown(), \
        f"docs/campaign-reference.md is stale: {REGENERATE}"


def test_every_field_is_documented():
    load_plugins()
    assert undocumented_fields() == []


def test_servebench_schema_prints_a_json_schema_with_every_engine_and_provider_kind():
    done = subprocess.run([sys.executable, "-m", "servebench", "schema"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    assert {"name", "engine", "provider", "model", "modes", "load"} <= set(schema["properties"])
    engine_refs = {choice["$ref"].rsplit("/", 1)[1] for choice in schema["properties"]["engine"]["oneOf"]}
    assert {"VllmEngineSpec", "LlamaCppEngineSpec"} <= engine_refs
    assert all(ref in schema["$defs"] for ref in engine_refs)
    done = subprocess.run([sys.executable, "-m", "servebench", "schema", "--format", "markdown"], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout == (ROOT / "docs" / "campaign-reference.md").read_text()
