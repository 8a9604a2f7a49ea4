"""The modes an engine cannot serve for an MoE model are refused at plan time, all at once, each
naming its file line, field, mode and reason (campaigns/modes-moe.yaml lists only what serves)."""

from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, load_campaign

REFUSED = Path(__file__).parents[1] / "campaigns" / "refused" / "modes-moe-refused.yaml"


def test_every_unservable_mode_of_the_moe_comparison_is_refused_with_its_field_and_reason():
    with pytest.raises(SpecError) as caught:
        load_campaign(REFUSED)
    lines = str(caught.value).splitlines()
    expected = {
        "modes[1].dp: mode dp2-ray:": "hang at the executor's start barrier",
        "modes[2].ep: mode tp1-ep:": "vLLM ignores --enable-expert-parallel when dp x tp = 1",
        "modes[3].pp:": "pp > 1 with enforce_eager: true does not serve",
        "modes[4].dp: mode llamacpp-dp2:": "engine 'llamacpp' has no data parallelism",
    }
    for where, reason in expected.items():
        found = [line for line in lines if where in line]
        assert len(found) == 1, (where, lines)
        assert found[0].startswith(f"{REFUSED}:"), found[0]
        assert reason in found[0], found[0]
    assert not any("mode tp1:" in line for line in lines), lines
