"""A test's folder is its kind: the rule the collection applies (tests/support/kinds.py)."""

from tests.support.kinds import kind_of, kind_problem


def test_the_folder_names_the_kind():
    assert kind_of("unit/test_sweep.py") == "unit"
    assert kind_of("e2e/test_faults.py") == "e2e"
    assert kind_of("support/kinds.py") is None
    assert kind_of("test_loose.py") is None


def test_markers_that_agree_with_the_folder_pass():
    assert kind_problem("unit/test_sweep.py", {"parametrize"}) is None
    assert kind_problem("e2e/test_e2e_load.py", {"vllm", "e2e"}) is None
    assert kind_problem("nightly/test_e2e_ray.py", {"vllm", "nightly"}) is None


def test_a_heavy_test_in_the_unit_folder_is_refused_naming_its_markers():
    problem = kind_problem("unit/test_x.py", {"vllm", "root"})
    assert problem is not None and "root, vllm" in problem and "tests/e2e/" in problem


def test_a_nightly_test_outside_the_nightly_folder_and_the_reverse_are_refused():
    assert "tests/nightly/" in (kind_problem("e2e/test_x.py", {"nightly"}) or "")
    assert "without @pytest.mark.nightly" in (kind_problem("nightly/test_x.py", {"vllm"}) or "")


def test_a_test_outside_every_kind_folder_is_refused():
    assert "tests/unit/" in (kind_problem("test_loose.py", set()) or "")
