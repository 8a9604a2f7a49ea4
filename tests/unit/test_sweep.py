from servebench.campaign.loading import parse_campaign
from servebench.config.sweep import expand

CAMPAIGN = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}, {name: tp2, tp: 2}]
load: {clients: [4, 1], rates: [8, 2.5], requests: 10, repeats: 2, seed: 7}
"""


def test_expansion_is_modes_x_points_x_repeats_grouped_by_mode():
    cells = expand(parse_campaign(CAMPAIGN))
    assert len(cells) == 2 * 4 * 2
    assert [c.key for c in cells[:8]] == [
        "tp1.c1.r0", "tp1.c1.r1", "tp1.c4.r0", "tp1.c4.r1",
        "tp1.rate2.5.r0", "tp1.rate2.5.r1", "tp1.rate8.r0", "tp1.rate8.r1",
    ]
    assert {c.mode.name for c in cells[8:]} == {"tp2"}


def test_keys_are_unique_and_stable():
    first = [c.key for c in expand(parse_campaign(CAMPAIGN))]
    again = [c.key for c in expand(parse_campaign(CAMPAIGN))]
    assert first == again
    assert len(set(first)) == len(first)


def test_modes_share_workloads_repeats_do_not():
    cells = {c.key: c for c in expand(parse_campaign(CAMPAIGN))}
    assert cells["tp1.c4.r0"].seed == cells["tp2.c4.r0"].seed
    assert cells["tp1.c4.r0"].seed != cells["tp1.c4.r1"].seed
    assert cells["tp1.c4.r0"].seed != cells["tp1.c1.r0"].seed


def test_base_seed_changes_every_cell_seed():
    other = expand(parse_campaign(CAMPAIGN.replace("seed: 7", "seed: 8")))
    assert all(a.seed != b.seed for a, b in zip(expand(parse_campaign(CAMPAIGN)), other))


NETWORK = CAMPAIGN.replace("modes: [{name: tp1}, {name: tp2, tp: 2}]", "modes: [{name: tp2, tp: 2}]").replace(
    '{kind: local, nodes: [{name: n0, cpus: "0-1"}]}',  # links are shaped by a provider of separate hosts
    '{kind: ssh, hosts: [{name: n0, address: 198.18.0.1, cpus: "0-1"}]}') + """
network: {testbed: sbtb, links: [{delay_ms: 0}, {delay_ms: 5}, {rate_mbit: 100, hosts: [n0]}]}
"""


def test_the_network_axis_runs_every_point_under_each_link_setting_on_the_same_workload():
    cells = expand(parse_campaign(NETWORK))
    assert [c.key for c in cells if c.point.clients == 1 and c.repeat == 0] == [
        "tp2.plain.c1.r0", "tp2.d5ms.c1.r0", "tp2.r100mbit.c1.r0"]
    by_key = {c.key: c for c in cells}
    assert by_key["tp2.plain.c4.r1"].seed == by_key["tp2.d5ms.c4.r1"].seed == by_key["tp2.r100mbit.c4.r1"].seed
    assert [c.link.label for c in cells[::8]] == ["plain", "d5ms", "r100mbit"]  # grouped: few link changes


def test_a_campaign_without_a_network_axis_keeps_its_keys_and_hash():
    campaign = parse_campaign(CAMPAIGN)
    assert "network" not in campaign.normalized() and all(c.link is None for c in expand(campaign))
    assert parse_campaign(NETWORK).spec_hash() != parse_campaign(NETWORK.replace("delay_ms: 5", "delay_ms: 1")
                                                                 ).spec_hash()


def test_a_named_second_entry_measures_the_first_setting_again_last_on_the_same_workload():
    campaign = parse_campaign(NETWORK.replace("hosts: [n0]}]", "hosts: [n0]}, {delay_ms: 0, name: plain-again}]"))
    cells = expand(campaign)
    assert [c.key for c in cells if c.point.clients == 1 and c.repeat == 0] == [
        "tp2.plain.c1.r0", "tp2.d5ms.c1.r0", "tp2.r100mbit.c1.r0", "tp2.plain-again.c1.r0"]
    by_key = {c.key: c for c in cells}
    assert by_key["tp2.plain-again.c4.r1"].seed == by_key["tp2.plain.c4.r1"].seed
    assert by_key["tp2.plain-again.c4.r1"].link.delay_ms == 0
    assert "name" not in parse_campaign(NETWORK).normalized()["network"]["links"][0]  # unnamed: the hash it had


def test_two_link_settings_with_one_label_are_refused_by_line():
    import pytest

    from servebench.campaign.loading import SpecError
    with pytest.raises(SpecError, match=r"<string>:8: network.links\[1\]: link setting 'd5ms' is given more than once"):
        parse_campaign(NETWORK.replace("{delay_ms: 0}", "{delay_ms: 5}"))


MODEL_AXES = CAMPAIGN.replace("model: {generate: tiny-llama}", """engine: {kind: llamacpp}
model: {generate: tiny-llama}
model_axes: {quantization: [f32, q4_0]}""").replace(
    "{name: tp2, tp: 2}", "{name: rpc2, executor: rpc, pp: 2, oversubscribe: true}")


def test_model_axes_give_every_mode_one_configuration_per_variant_named_by_it():
    from servebench.config.sweep import configurations

    campaign = parse_campaign(MODEL_AXES)
    served = configurations(campaign)
    assert [(m.name, m.model) for m in served] == [
        ("tp1-f32", {"quantization": "f32"}), ("tp1-q4_0", {"quantization": "q4_0"}),
        ("rpc2-f32", {"quantization": "f32"}), ("rpc2-q4_0", {"quantization": "q4_0"})]
    assert [campaign.model_for(m).gguf_type() for m in served] == ["f32", "q4_0", "f32", "q4_0"]
    cells = expand(campaign)
    assert [c.key for c in cells[:3]] == ["tp1-f32.c1.r0", "tp1-f32.c1.r1", "tp1-f32.c4.r0"]
    by_key = {c.key: c for c in cells}
    assert by_key["tp1-f32.c4.r0"].seed == by_key["tp1-q4_0.c4.r0"].seed  # the same requests for each variant


def test_model_axes_combine_with_knob_axes_and_dtype_before_quantization():
    from servebench.config.sweep import configuration_space

    text = MODEL_AXES.replace("model_axes: {quantization: [f32, q4_0]}",
                              "model_axes: {dtype: [float32, auto], quantization: [q8_0]}\nknobs: {parallel: [2]}")
    space = configuration_space(parse_campaign(text))
    assert [m.name for _, m in space][:2] == ["tp1-p2-fp32-q8_0", "tp1-p2-auto-q8_0"]
    assert space[0][0] == {"mode": "tp1", "parallel": 2, "dtype": "float32", "quantization": "q8_0"}


def test_a_variant_is_part_of_the_series_identity_and_no_axes_keep_the_hash():
    from servebench.analysis.regression.series import series_id

    campaign = parse_campaign(MODEL_AXES)
    identities = {c.mode.name: {"campaign": campaign.name, "mode": c.mode.name} for c in expand(campaign)}
    assert series_id(identities["tp1-f32"], "hw") != series_id(identities["tp1-q4_0"], "hw")
    plain = parse_campaign(CAMPAIGN)
    assert "model_axes" not in plain.normalized()
    assert all("model" not in mode for mode in plain.normalized()["modes"])
    assert [c.mode.model for c in expand(plain)] == [{}] * len(expand(plain))
