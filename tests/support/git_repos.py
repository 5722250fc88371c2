"""A git repository of the simulator's own build context (its Dockerfile and harness/sim, as
harness/servers/images.py's sim_context assembles them), with a history of small commits: one
of them slows every decode step, one may not build. What `specgate bisect` over commits is
tested on (tests/bisect/, tests/servers/test_git_source.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.servers.images import sim_base_tag, sim_context

DECODE = "                duration, items = self._decode_step()\n"
SLOWER = DECODE + "                duration *= 1.5  # the regression a bisect is to find\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=specgate tests", "-c", "user.email=t@example.com",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "--short=12", "HEAD")


def sim_source_repo(repo: Path, commits: int = 8, slow_at: int | None = 5, broken_at: int | None = None) -> list[str]:
    """Commits 0 .. commits-1 (short ids, oldest first): 0 the simulator as it is; commit
    `slow_at` makes every decode step 1.5x longer; commit `broken_at` adds a module that does
    not compile (its build fails) and the next one removes it; the others touch a notes file."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for name, source in sim_context(sim_base_tag()).files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, repo / name)
    made = [commit(repo, "the simulator as it is")]
    scheduler = repo / "harness" / "sim" / "scheduler.py"
    assert DECODE in scheduler.read_text()
    broken = repo / "harness" / "sim" / "half_done.py"
    for n in range(1, commits):
        if n == slow_at:
            scheduler.write_text(scheduler.read_text().replace(DECODE, SLOWER))
            made.append(commit(repo, "decode: a step 1.5x longer"))
            continue
        if n == broken_at:
            broken.write_text("def half_done(:\n")
            made.append(commit(repo, "a module that does not compile"))
            continue
        if broken.exists():
            broken.unlink()
        with (repo / "NOTES.md").open("a") as notes:
            notes.write(f"change {n}\n")
        made.append(commit(repo, f"notes: change {n}"))
    return made
