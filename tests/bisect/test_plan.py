"""What `specgate bisect` searches, checked before any server starts: each mistake one
sentence, exit status 4, nothing written."""

from __future__ import annotations

import pytest

from harness import cli
from harness.bisect.plan import BisectPlan
from harness.config.compose import DEFAULT_CONF_DIR


def test_the_list_is_the_bisected_key_and_every_ab_runs_until_decided():
    plan = BisectPlan.of(["+exp=sim_smoke", "backend=process", "server.sim.decode_step_ms=4.0,4.2,4.4"],
                         DEFAULT_CONF_DIR)
    assert (plan.key, plan.values, plan.good, plan.bad) == ("server.sim.decode_step_ms", ["4.0", "4.2", "4.4"], "4.0", "4.4")
    assert plan.common == ["+exp=sim_smoke", "backend=process", "ab.rounds=auto"]
    tokens = plan.ab_tokens(1, DEFAULT_CONF_DIR)
    assert tokens[-2:] == ["a:server.sim.decode_step_ms=4.0", "b:server.sim.decode_step_ms=4.2"]
    fixed = BisectPlan.of(["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,4.4", "ab.rounds=5"], DEFAULT_CONF_DIR)
    assert fixed.common == ["+exp=sim_smoke", "ab.rounds=5"]


@pytest.mark.parametrize("tokens, sentence", [
    (["+exp=sim_smoke"], "specgate bisect needs one key with an ordered list of values, the first good and the last bad"),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,"], "server.sim.decode_step_ms: an empty value in the list"),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,4.2,4.0"], "server.sim.decode_step_ms: 4.0 listed twice"),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,4.2", "workload.concurrency=1,2"],
     "specgate bisect searches one list; server.sim.decode_step_ms, workload.concurrency each give one"),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,fast"], "server.sim.decode_step_ms=fast: "),
    (["+exp=sim_smoke", "server.sim.decode_stepms=4.0,4.2"], "server.sim.decode_stepms=4.0: "),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,4.2", "b:nccl=default"], "specgate bisect sets side A and side B"),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,4.2", "-k", "x"], "specgate bisect takes Hydra overrides only"),
    (["+exp=sim_smoke", "server.sim.decode_step_ms=4.0,4.2", "ab.rounds=1"], "ab.rounds must be a finite number >= 2"),
])
def test_each_mistake_is_one_sentence_before_any_server(tokens, sentence, tmp_path, capsys):
    assert cli.main(["bisect", *tokens, f"record.root={tmp_path / 'runs'}"]) == 4
    err = capsys.readouterr().err
    assert sentence in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_bisected_value_that_is_a_secret_reaches_the_record_only_as_its_fingerprint(tmp_path):
    from harness.bisect.record import BisectRecord

    listed = "+server.env.MY_TOKEN=firstsecret11,secondsecret22,thirdsecret33"
    plan = BisectPlan.of(["+exp=sim_smoke", "backend=process", f"record.root={tmp_path}", listed], DEFAULT_CONF_DIR)
    record = BisectRecord(plan, ["specgate", "bisect", listed])
    record.finish(1, interrupted=False)
    written = "".join(p.read_text() for p in record.path.rglob("*") if p.is_file())
    assert "secret:" in written and not [s for s in ("firstsecret11", "secondsecret22", "thirdsecret33") if s in written]


def test_a_range_of_commits_is_each_commit_from_the_good_to_the_bad_with_its_subject(tmp_path):
    from harness.bisect.record import BisectRecord, probe_rows
    from harness.bisect.search import Probe, Search
    from tests.support.git_repos import sim_source_repo

    commits = sim_source_repo(tmp_path / "src", commits=4, slow_at=2)
    git = ["+exp=sim_smoke", "build=git", "build.engine=sim", "build.module=harness.sim", f"build.repo={tmp_path / 'src'}",
           f"record.root={tmp_path / 'runs'}"]
    plan = BisectPlan.of([*git, f"build.git_ref={commits[0]}..main"], DEFAULT_CONF_DIR)
    assert (plan.key, plan.values) == ("build.git_ref", commits)
    assert plan.described[commits[2]] == "decode: a step 1.5x longer"
    assert plan.ab_tokens(2, tmp_path)[-1] == f"b:build.git_ref={commits[2]}"
    record = BisectRecord(plan, ["specgate", "bisect", *git])
    record.search = Search(plan.values, lambda i: Probe(i, plan.values[i], "regressed", "slower"))
    record.search.probes.append(Probe(2, commits[2], "regressed", "slower"))
    assert f'build.git_ref={commits[2]} ("decode: a step 1.5x longer")' in probe_rows(record.data("running"))[1][0][1]


@pytest.mark.parametrize("tokens, sentence", [
    (["build.git_ref=nosuch..main"], "build.git_ref=nosuch..main: arm 'baseline': build.git_ref nosuch is not a commit of "),
    (["build.git_ref=main..main~1"], "build.git_ref=main..main~1: main is not an ancestor of main~1"),
    (["build.git_ref=main..main"], "build.git_ref=main..main: main..main is one commit: nothing to bisect"),
])
def test_a_commit_range_that_does_not_exist_is_one_sentence(tokens, sentence, tmp_path, capsys):
    from tests.support.git_repos import sim_source_repo

    sim_source_repo(tmp_path / "src", commits=3, slow_at=None)
    git = ["+exp=sim_smoke", "build=git", "build.engine=sim", "build.module=harness.sim", f"build.repo={tmp_path / 'src'}"]
    assert cli.main(["bisect", *git, *tokens, f"record.root={tmp_path / 'runs'}"]) == 4
    err = capsys.readouterr().err
    assert sentence in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


def test_a_range_needs_a_git_build(capsys, tmp_path):
    assert cli.main(["bisect", "+exp=sim_smoke", "build.git_ref=v1..v2", f"record.root={tmp_path}"]) == 4
    assert "a range of commits is built by build.kind=git (build=git build.repo=PATH), and this experiment's build " \
           "is simulator" in capsys.readouterr().err
