"""A build from a git repository at one commit (build.kind=git): the context is what the commit
holds, its image tag changes with the commit and nothing else, the range a bisect searches, and
each mistake one sentence (no Docker engine needed: the context and its hash)."""

from __future__ import annotations

import re

import pytest

from harness.config.compose import ConfigError, DEFAULT_CONF_DIR
from harness.config.schema import BuildConfig
from harness.run.compose import compose
from harness.servers import git_source
from harness.servers.images import ImageError, git_context
from tests.support.git_repos import sim_source_repo

GIT = ["+exp=sim_smoke", "build=git", "build.engine=sim", "build.module=harness.sim"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("git") / "sim-source"
    return path, sim_source_repo(path, commits=8, slow_at=5, broken_at=3)


def test_the_context_is_the_commit_not_the_working_tree_and_its_hash_follows_the_commit(repo):
    path, commits = repo
    (path / "NOTES.md").write_text("an edit nobody committed\n")  # the working tree is not what is built
    try:
        first, commit = git_context(BuildConfig(kind="git", repo=str(path), git_ref=commits[1]), None)
    finally:
        (path / "NOTES.md").unlink()
    assert commit.startswith(commits[1]) and len(commit) == 40
    assert first.files["NOTES.md"][0] == b"change 1\n" and "Dockerfile" in first.files
    again, _ = git_context(BuildConfig(kind="git", repo=str(path), git_ref=commits[1]), None)
    later, _ = git_context(BuildConfig(kind="git", repo=str(path), git_ref=commits[2]), None)
    assert first.content_hash() == again.content_hash() != later.content_hash()
    slow, _ = git_context(BuildConfig(kind="git", repo=str(path), git_ref=commits[5]), None)
    assert b"duration *= 1.5" in slow.files["harness/sim/scheduler.py"][0]


def test_a_range_is_the_good_commit_then_each_after_it_up_to_the_bad_one(repo):
    path, commits = repo
    found = git_source.commits_between(path, commits[0], commits[7])
    assert [c for c, _ in found] == commits
    assert found[5][1] == "decode: a step 1.5x longer"
    assert [c for c, _ in git_source.commits_between(path, commits[2], "main")] == commits[2:]


@pytest.mark.parametrize("good, bad, sentence", [
    ("nosuchref", "main", "build.git_ref nosuchref is not a commit of "),
    ("main", "main", "main..main is one commit: nothing to bisect"),
    ("main", "main~3", "main is not an ancestor of main~3 in "),
])
def test_a_range_git_cannot_give_is_one_sentence(repo, good, bad, sentence):
    with pytest.raises(git_source.GitSourceError, match=re.escape(sentence)):
        git_source.commits_between(repo[0], good, bad)


@pytest.mark.parametrize("cfg, sentence", [
    (dict(repo=None, git_ref="main"), "build.repo is not set; build.kind=git needs the git repository to build from"),
    (dict(repo="/nonexistent/repo", git_ref="main"), "build.repo /nonexistent/repo is not a folder"),
    (dict(git_ref=None), "build.git_ref is not set"),
    (dict(git_ref="v9"), "build.git_ref v9 is not a commit of "),
    (dict(git_ref="main", context="docker/cuda"), "build.context: no folder docker/cuda of commit "),
    (dict(git_ref="main", context="harness"), "harness at commit "),
])
def test_a_build_git_cannot_give_is_one_sentence(repo, cfg, sentence):
    with pytest.raises(ImageError, match=re.escape(sentence)):
        git_context(BuildConfig(kind="git", **{"repo": str(repo[0]), **cfg}), None)


def test_a_git_build_is_checked_when_composed(repo, tmp_path):
    path, commits = repo
    assert compose([*GIT, f"build.repo={path}", f"build.git_ref={commits[2]}"]).base.build.git_ref == commits[2]
    with pytest.raises(ConfigError, match=re.escape(f"arm 'baseline': build.repo {tmp_path} is not a git repository")):
        compose([*GIT, f"build.repo={tmp_path}", "build.git_ref=main"], DEFAULT_CONF_DIR)
    with pytest.raises(ConfigError, match=re.escape("and backend=process starts no image: use backend=docker")):
        compose([*GIT, "backend=process", f"build.repo={path}", "build.git_ref=main"])
