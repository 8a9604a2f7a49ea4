import pytest

from servebench.cpus import format_cpu_list, parse_cpu_list, split_cpus
from servebench.engines.vllm.placement import omp_threads_bind


def test_parse_and_format_round_trip():
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


@pytest.mark.parametrize("text", ["", "3-1", "a"])
def test_parse_rejects_bad_lists(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_split_is_contiguous_disjoint_and_balanced():
    assert split_cpus([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert split_cpus([0, 1], 2) == [[0], [1]]


def test_more_ranks_than_cpus_share_cores_round_robin():
    """An oversubscribed mode (the smoke's TP=2 on one server core): every rank still gets a core."""
    assert split_cpus([0], 2) == [[0], [0]]
    assert split_cpus([4, 5], 3) == [[4], [5], [4]]
    assert omp_threads_bind([0], 2) == "0|0"


def test_no_ranks_is_an_error():
    with pytest.raises(ValueError):
        split_cpus([0], 0)


def test_omp_binding_has_one_list_per_rank():
    assert omp_threads_bind([0, 1], 1) == "0-1"
    assert omp_threads_bind([0, 1], 2) == "0|1"
    assert omp_threads_bind(list(range(8)), 4) == "0-1|2-3|4-5|6-7"
