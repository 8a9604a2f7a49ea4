"""The commit axis and bisect: the pure decisions (binary search, judging a step against
the baseline's noise), git sources (resolution, the path from good to bad, the tree a build gets,
a key that follows the commit and not the repository's place) and the commit axis of a campaign.
The end-to-end bisect over llama.cpp commits is tests/nightly/test_bisect_e2e.py."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from servebench.bisect.search import BisectError, judge, most_builds, search
from servebench.bisect.steps import step_campaign
from servebench.builds import git_source
from servebench.builds.cmake import cmake_inputs, cmake_key, fetch
from servebench.campaign.loading import parse_campaign
from servebench.config.sweep import build_specs, configurations, expand
from servebench.engines import get_engine


@pytest.mark.parametrize("commits", [2, 3, 8, 9, 17])
def test_search_names_every_first_bad_commit_within_the_bound(commits: int):
    names = [f"c{i}" for i in range(commits)]
    for first_bad in range(1, commits):
        found, asked = search(names, lambda name: int(name[1:]) >= first_bad)
        assert found == first_bad
        assert 1 + len(asked) <= most_builds(commits) and 0 not in asked and commits - 1 not in asked


def test_most_builds_is_the_good_commit_and_the_midpoints():
    assert [most_builds(n) for n in (2, 3, 5, 8, 9, 10)] == [1, 2, 3, 4, 4, 5]
    import math
    for n in range(3, 40):
        assert most_builds(n) <= math.ceil(math.log2(n)) + 1   # the bound bisect promises


def test_a_step_is_bad_when_its_repeats_are_apart_from_the_baselines_by_the_threshold():
    steady = [10.0, 10.1, 9.9]
    slower = judge("a" * 40, steady, [12.0, 12.1, 11.9], "lower", 0.10)            # 20 % slower, apart by 18 %
    assert slower.bad and slower.change == pytest.approx(0.2) and slower.separation == pytest.approx(0.18)
    assert not judge("a" * 40, steady, [10.5, 10.4, 10.6], "lower", 0.10).bad    # 5 %: under the threshold
    assert not judge("a" * 40, steady, [9.0, 9.1, 8.9], "lower", 0.10).bad       # faster is never bad
    assert judge("a" * 40, [100.0, 101.0], [80.0, 81.0], "higher", 0.10).bad      # throughput down 20 %
    assert not judge("a" * 40, [100.0, 101.0], [120.0, 90.0], "higher", 0.10).bad
    unsure = judge("a" * 40, [10.0, 12.5, 9.5], [11.8, 9.8, 11.9], "lower", 0.10)  # 18 % worse, within the noise
    assert unsure.verdict == "undecided" and not unsure.bad and "overlap" in unsure.undecided


def make_repo(where: Path, commits: int) -> tuple[Path, list[str]]:
    """A git repository of `commits` commits, one file changed by each."""
    where.mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, env=env, check=True, capture_output=True, text=True).stdout

    git("init", "--quiet", "-b", "main")
    hashes = []
    for index in range(commits):
        (where / "CMakeLists.txt").write_text(f"# version {index}\n")
        git("add", "-A")
        git("commit", "--quiet", "-m", f"change {index}")
        hashes.append(git("rev-parse", "HEAD").strip())
    git("tag", "v1", hashes[1])
    return where, hashes


def test_git_sources_resolve_list_the_path_and_archive_the_tree(tmp_path: Path):
    repo, hashes = make_repo(tmp_path / "repo", 5)
    cache = tmp_path / "cache"
    assert git_source.resolve(str(repo), "v1", cache) == hashes[1]
    assert git_source.resolve(str(repo), hashes[3][:7], cache) == hashes[3]
    assert git_source.commits_between(str(repo), "v1", "main", cache) == hashes[1:]
    with pytest.raises(git_source.GitError, match="is not an ancestor"):
        git_source.commits_between(str(repo), hashes[4], hashes[2], cache)
    with pytest.raises(git_source.GitError, match="no commit 'nope'"):
        git_source.resolve(str(repo), "nope", cache)
    with pytest.raises(git_source.GitError, match="not a git repository"):
        git_source.resolve(str(tmp_path), "main", cache)
    (repo / "sub").mkdir()
    with pytest.raises(git_source.GitError, match="a folder inside the repository"):
        git_source.resolve(str(repo / "sub"), "main", cache)
    with pytest.raises(git_source.GitError, match="give an absolute path"):
        git_source.resolve("repo", "main", cache)
    (repo / "CMakeLists.txt").write_text("# not committed\n")       # a work tree's changes are never built
    (tmp_path / "scratch").mkdir()
    with tarfile.open(git_source.archive(str(repo), hashes[2], cache, tmp_path / "scratch")) as tree:
        assert tree.extractfile("src/CMakeLists.txt").read() == b"# version 2\n"


def test_a_good_commit_merged_from_a_side_branch_is_refused_naming_the_merge(tmp_path: Path):
    repo, hashes = make_repo(tmp_path / "repo", 3)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout

    git("checkout", "--quiet", "-b", "side", hashes[1])
    (repo / "side.txt").write_text("a side change\n")
    git("add", "-A")
    git("commit", "--quiet", "-m", "on the side")
    side = git("rev-parse", "HEAD").strip()
    (repo / "side.txt").write_text("another side change\n")
    git("commit", "--quiet", "-am", "more on the side")
    git("checkout", "--quiet", "main")
    git("merge", "--quiet", "--no-ff", "-m", "merge side", "side")
    with pytest.raises(git_source.GitError, match="came in through a merge"):
        git_source.commits_between(str(repo), side, "main", tmp_path / "cache")
    assert git_source.commits_between(str(repo), hashes[2], "main", tmp_path / "cache")[0] == hashes[2]


def test_a_git_build_keys_on_the_commit_not_on_the_repositorys_place(tmp_path: Path):
    repo, hashes = make_repo(tmp_path / "repo", 3)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
    engine = get_engine("llamacpp")
    spec = engine.spec_model.model_validate({"kind": "llamacpp", "source": {"git": str(repo), "commit": "main"}})
    recipe = engine.build_recipe(spec)
    assert recipe.target == "native" and recipe.git.commit == "main"
    cache = tmp_path / "cache"
    inputs = cmake_inputs(recipe, fetch(recipe, cache))
    assert inputs["source_commit"] == hashes[2] and inputs["source"] == "git"
    assert inputs["host_cpu_flags"] and inputs["compiler_flags"] == ["-march=native"]  # this CPU's build
    moved = recipe.model_copy(update={"git": recipe.git.model_copy(update={"repo": str(clone)})})
    assert cmake_key(moved, cmake_inputs(moved, fetch(moved, cache))) == cmake_key(recipe, inputs)
    older = recipe.model_copy(update={"git": recipe.git.model_copy(update={"commit": hashes[1]})})
    assert cmake_key(older, cmake_inputs(older, fetch(older, cache))) != cmake_key(recipe, inputs)


AXIS = """
name: commits
provider: {kind: local, nodes: [{name: n0, cpus: "0"}]}
engine:
  kind: llamacpp
  source: {git: /src/llama.cpp, commits: [b6500, 0123456789abcdef0123]}
model: {generate: tiny-llama}
modes:
  - {name: tp1, executor: local}
load: {clients: [1, 2], requests: 4, client: {cpus: "1"}}
"""


def test_commits_are_a_sweep_axis_each_its_own_build_the_first_the_reference():
    campaign = parse_campaign(AXIS)
    served = configurations(campaign)
    assert [m.name for m in served] == ["tp1-b6500", "tp1-01234567"]
    assert not served[0].build                                          # the engine's own build: the reference
    assert campaign.engine_spec_for(served[1]).source.commit == "0123456789abcdef0123"
    assert [spec.source.commit or spec.source.commits for _, spec in build_specs(campaign)] == \
        [["b6500", "0123456789abcdef0123"], "0123456789abcdef0123"]
    assert len(expand(campaign)) == 4
    assert get_engine("llamacpp").build_recipe(campaign.engine).git.commit == "b6500"


def test_a_bisect_step_measures_one_mode_at_one_commit_and_one_load_point(tmp_path: Path):
    data = yaml.safe_load(AXIS)
    data["modes"].append({"name": "other", "executor": "local"})
    data["knobs"] = {"ctx_size": [512, 1024]}
    campaign = parse_campaign(yaml.safe_dump(data))
    step = step_campaign(data, campaign, tmp_path, "tp1", "f" * 40, repeats=3)
    assert step["engine"]["source"] == {"git": "/src/llama.cpp", "commit": "f" * 40}
    assert [m["name"] for m in step["modes"]] == ["tp1"] and "knobs" not in step
    assert step["load"]["clients"] == [1] and step["load"]["repeats"] == 3 and step["name"] == "commits-bisect"
    cells = expand(parse_campaign(yaml.safe_dump(step)))
    assert [(c.mode.name, c.point.clients, c.repeat) for c in cells] == [("tp1", 1, 0), ("tp1", 1, 1), ("tp1", 1, 2)]
    # the detector names a series by its configuration and load point: a step measures exactly that
    names = [m.name for m in configurations(campaign)]
    knobbed = next(name for name in names if name.startswith("other-") and "cs1024" in name)
    step = step_campaign(data, campaign, tmp_path, knobbed, "f" * 40, repeats=2, point="c2")
    assert step["modes"][0]["name"] == knobbed and step["modes"][0]["knobs"] == {"ctx_size": 1024}
    assert step["load"]["clients"] == [2]
    with pytest.raises(BisectError, match="no load point 'c9'"):
        step_campaign(data, campaign, tmp_path, "tp1", "f" * 40, repeats=2, point="c9")
    with pytest.raises(BisectError, match="no mode or configuration 'nope'"):
        step_campaign(data, campaign, tmp_path, "nope", "f" * 40, repeats=2)


def test_a_regression_between_two_commits_prints_the_bisect_that_chases_it():
    from servebench.analysis.regression.summary import bisect_command, markdown

    row = {"kind": "regression", "status": "confirmed", "metric": "tpot_p50_ms", "campaign": "nightly",
           "campaign_file": "/srv/campaigns/nightly llama.yaml", "mode": "tp1", "change": 0.42, "cell_point": "tp1.c4",
           "engine_last_good": "83703cbffa62", "engine_first_bad": "9a784ae1aa4b", "engine_versions": [],
           "series_label": "tp1 c1", "baseline_value": 1.0, "value": 1.42, "p_value": 0.001,
           "last_good_run": "r1", "first_bad_run": "r2"}
    assert bisect_command(row) == ("servebench bisect '/srv/campaigns/nightly llama.yaml' --good 83703cbffa62 "
                                   "--bad 9a784ae1aa4b --mode tp1 --point c4 --metric tpot_p50_ms --threshold 0.21")
    assert "servebench bisect" in markdown([row], "r2")
    assert bisect_command({**row, "engine_first_bad": "0.33.0", "engine_last_good": "0.32.0"}) is None  # versions
    assert bisect_command({**row, "kind": "improvement"}) is None
