"""The modes an engine cannot serve for an MoE model are refused at plan time, all at once, each
naming its file line, field, mode and reason (campaigns/modes-moe.yaml lists only what serves)."""

from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, load_campaign

REFUSED = Path(__file__).parent / "campaigns" / "refused" / "modes-moe-refused.yaml"


def test_every_unservable_mode_of_the_moe_comparison_is_refused_with_its_field_and_reason():
    with pytest.raises(SpecError) as caught:
        load_campaign(REFUSED)
    lines = str(caught.value).splitlines()
    expected = {
        "modes[1].dp: mode dp2:": "NotImplementedError in DeviceCommunicatorBase.all_gatherv",
        "modes[2].ep: mode dp2-ep:": "ep: true with dp > 1",
        "modes[3].ep: mode tp2-ep:": "segmentation fault in cpu_fused_moe",
        "modes[4].pp:": "pp > 1 with enforce_eager: true does not serve",
        "modes[5].dp: mode llamacpp-dp2:": "engine 'llamacpp' has no data parallelism",
    }
    for where, reason in expected.items():
        found = [line for line in lines if where in line]
        assert len(found) == 1, (where, lines)
        assert found[0].startswith(f"{REFUSED}:"), found[0]
        assert reason in found[0], found[0]
    assert not any("mode tp1" in line for line in lines), lines
