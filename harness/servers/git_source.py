"""A build context from a git repository at one commit (`build.kind: git`), and the commits
between two refs (what `specgate bisect ... build.git_ref=GOOD..BAD` searches).

    build:
      kind: git
      repo: /src/sglang-docker      # a git repository (a path here; cloned or fetched beforehand)
      git_ref: v0.5.23              # any ref git resolves: a tag, a branch, a commit
      context: docker/cuda          # the folder inside the repository with its Dockerfile (default: its root)
      image: lmsysorg/sglang:base   # optional: passed to the Dockerfile as BASE_IMAGE

The context is the tree of the commit, read with `git archive` (never the working tree: what
is built is what the commit holds), so an image is tagged by the commit and everything else
that went into it (harness/servers/images.py's content hash), and a commit built once is reused.
Every git error is one sentence naming the repository and the ref.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

GIT_TIMEOUT_S = 120


class GitSourceError(Exception):
    """A repository, ref or range that git cannot give: one sentence."""


def git(repo: str | Path, *args: str) -> str:
    """git's output in `repo`; its first error line as a GitSourceError."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise GitSourceError("git is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise GitSourceError(f"git {' '.join(args)} in {repo} took over {GIT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()] or [f"exit status {done.returncode}"]
        raise GitSourceError(lines[0].removeprefix("fatal: ").strip())
    return done.stdout


def repository(repo: str | None) -> Path:
    """build.repo as a git repository's folder."""
    if not repo:
        raise GitSourceError("build.repo is not set; build.kind=git needs the git repository to build from")
    path = Path(repo).expanduser()
    if not path.is_dir():
        raise GitSourceError(f"build.repo {repo} is not a folder")
    try:
        git(path, "rev-parse", "--git-dir")
    except GitSourceError:
        raise GitSourceError(f"build.repo {repo} is not a git repository") from None
    return path


def commit_of(repo: str | Path, ref: str | None) -> str:
    """The full commit id `ref` names in `repo`."""
    if not ref:
        raise GitSourceError("build.git_ref is not set; build.kind=git needs the commit (or tag, or branch) to build")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except GitSourceError:
        raise GitSourceError(f"build.git_ref {ref} is not a commit of {repo}") from None


def commits_between(repo: str | Path, good: str, bad: str) -> list[tuple[str, str]]:
    """(short id, subject) of `good` and of each commit after it up to `bad`, oldest first, along
    the first parents from `bad` (the line of history a merge landed on, as a release branch
    reads it): what a bisect of GOOD..BAD searches, the first good and the last bad."""
    first, last = commit_of(repo, good), commit_of(repo, bad)
    if first == last:
        raise GitSourceError(f"{good}..{bad} is one commit: nothing to bisect")
    try:
        git(repo, "merge-base", "--is-ancestor", first, last)
    except GitSourceError:
        raise GitSourceError(f"{good} is not an ancestor of {bad} in {repo}: give the good (older) ref first, "
                             f"GOOD..BAD") from None
    listed = git(repo, "rev-list", "--reverse", "--first-parent", "--ancestry-path", "--format=%h%x09%s",
                 "--abbrev=12", f"{first}..{last}")
    found = [tuple(line.split("\t", 1)) for line in listed.splitlines() if line and not line.startswith("commit ")]
    head = git(repo, "log", "-1", "--format=%h%x09%s", "--abbrev=12", first).strip().split("\t", 1)
    return [(head[0], head[1] if len(head) > 1 else ""), *[(c, s) for c, s in found]]


def context_files(repo: str | Path, commit: str, folder: str | None) -> dict[str, tuple[bytes, int]]:
    """The files of `folder` (the repository's root when None) at `commit`: path -> (bytes, mode)."""
    tree = f"{commit}:{folder.strip('/')}" if folder and folder.strip("/") else commit
    try:
        raw = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", tree], capture_output=True,
                             timeout=GIT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise GitSourceError(f"git archive {tree} in {repo} took over {GIT_TIMEOUT_S} s") from None
    if raw.returncode != 0:
        where = f"folder {folder} of commit {commit[:12]}" if folder else f"commit {commit[:12]}"
        raise GitSourceError(f"build.context: no {where} in {repo}")
    files: dict[str, tuple[bytes, int]] = {}
    with tarfile.open(fileobj=io.BytesIO(raw.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = (tar.extractfile(member).read(), 0o755 if member.mode & 0o111 else 0o644)
    if "Dockerfile" not in files:
        where = f"{folder} at" if folder else "the root of"
        raise GitSourceError(f"{where} commit {commit[:12]} of {repo} has no Dockerfile")
    return files
