"""`specgate bisect` end to end on the simulator (process backend): a list of decode-step
times with one step to a slower value finds that value, each probe an A/B recorded whole, the
record and its page. Each probe's load is small: the statistics are the A/B's (tests/ab/)."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from harness import cli
from tests.support.runs import require_whole_run_marker

pytestmark = pytest.mark.slow

LOAD = ["backend=process", "telemetry=off", "workload=chat_short", "workload.num_prompts=16",
        "workload.concurrency=4", "workload.max_tokens=32", "ab.max_rounds=4"]


def test_the_first_slower_value_is_found_by_ab_against_the_good_end(tmp_path):
    require_whole_run_marker()
    # 4.0 ms per step is good, 6.0 (50 % slower) from the fourth value on
    status = cli.main(["bisect", *LOAD, "server.sim.decode_step_ms=4.0,4.01,4.02,6.0,6.01", f"record.root={tmp_path}"])
    (folder,) = [p for p in tmp_path.iterdir() if p.name.endswith("_bisect")]
    data = json.loads((folder / "bisect.json").read_text())
    assert status == 0 and data["status"] == "finished" and data["exit_status"] == 0, data
    assert data["first_bad"] == "6.0" and data["candidates"] == ["6.0"]
    probes = data["probes"]
    assert (probes[0]["value"], probes[0]["outcome"]) == ("6.01", "regressed")  # the ends first
    assert "judged against half of each change" in probes[0]["why"]
    assert {p["value"]: p["outcome"] for p in probes[1:]} == {"4.02": "same", "6.0": "regressed"}
    for probe in probes:  # each probe an A/B, whole, in steps/
        ab = json.loads((Path(probe["record"]) / "ab.json").read_text())
        assert Path(probe["record"]).parent == folder / "steps" and ab["status"] == "finished"
        assert ab["sides"]["B"]["overrides"] == [f"server.sim.decode_step_ms={probe['value']}"]
    summary = (folder / "summary.md").read_text()
    assert "first bad value: server.sim.decode_step_ms=6.0" in summary
    assert cli.main(["report", str(folder)]) == 0
    assert "Bisect: default" in (folder / "report.html").read_text()


def test_the_first_slower_commit_of_a_build_context_is_found_and_an_unbuildable_one_skipped(tmp_path):
    """The simulator's own build context in a git repository of 8 commits: the fifth after the
    good one makes every decode step 1.5x longer, the third does not compile. Each probe builds
    its commit's image (docker backend) and A/Bs it against the good end."""
    require_whole_run_marker()
    from harness.servers.images import sim_base_tag
    from tests.support.git_repos import sim_source_repo

    commits = sim_source_repo(tmp_path / "bisect-src", commits=8, slow_at=5, broken_at=3)
    git = ["build=git", "build.engine=sim", "build.module=harness.sim", f"build.repo={tmp_path / 'bisect-src'}",
           f"build.image={sim_base_tag()}", f"build.git_ref={commits[0]}..main"]
    try:
        # up to 6 rounds: containers on a busy 2-core box moved the "same" commit's first rounds by
        # 6-10 % in a clean clone's make test, and 4 rounds could not decide it (a flake, not a defect:
        # undecided is the truthful verdict there); the regressed probes decide in 3 rounds anyway
        status = cli.main(["bisect", *LOAD[1:-1], "ab.max_rounds=6", *git, f"record.root={tmp_path / 'runs'}"])
    finally:  # the commits' images (a layer each on the simulator's base): this test's alone
        engine = docker.from_env()
        for image in engine.images.list("specgate/git-bisect-src"):
            engine.images.remove(image.id, force=True)
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.name.endswith("_bisect")]
    data = json.loads((folder / "bisect.json").read_text())
    assert status == 0 and data["first_bad"] == commits[5], data
    # the ends; then the middle of 0..7, the third commit, which does not build: skipped, and the
    # next nearest the middle probed (the fourth: the same), then the fifth between it and the bad end
    assert [(p["value"], p["outcome"]) for p in data["probes"]] == [
        (commits[7], "regressed"), (commits[3], "skipped"), (commits[4], "same"), (commits[5], "regressed")]
    skipped = data["probes"][1]["why"]
    assert "building specgate/git-bisect-src:" in skipped and "half_done.py" in skipped and "\n" not in skipped, skipped
    # both sides' images are made before round 1: the commit that does not build costs no measurement
    assert json.loads((Path(data["probes"][1]["record"]) / "ab.json").read_text())["arms"] == {"default": []}
    ab = json.loads((Path(data["probes"][0]["record"]) / "ab.json").read_text())
    assert ab["sides"]["B"]["overrides"] == [f"build.git_ref={commits[7]}"]
    first = ab["arms"]["default"][0]  # each side's server says the commit its image was built from
    assert first["A"]["server"]["image"]["commit"].startswith(commits[0])
    assert first["B"]["server"]["image"]["commit"].startswith(commits[7])
    summary = (folder / "summary.md").read_text()
    assert f'first bad value: build.git_ref={commits[5]} ("decode: a step 1.5x longer")' in summary
