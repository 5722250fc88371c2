"""Reproduce and gate: repeats with a noise band, replay of the recorded config with a
drift table, baseline gating that names the regression, JUnit properties and the step
summary for CI — end to end on the simulator."""

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from harness.record.requests import read_lines
from tests.support.runs import run_suites

ROOT = Path(__file__).resolve().parents[2]
CENTRAL = {"output_tok_s", "itl_ms.p50", "e2e_ms.p50", "accept_length", "verify_cycle_ms"}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    junit, step_summary = root / "junit.xml", root / "step_summary.md"
    proc = run_suites("+exp=sim_smoke", "gate.repeats=2", f"record.root={root}", f"--junitxml={junit}",
                      env={"GITHUB_STEP_SUMMARY": str(step_summary)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    return root, (root / "latest").resolve(), junit, step_summary, proc


@pytest.mark.slow
def test_repeats_report_median_spread_and_cv(first_run):
    _, record, _, _, proc = first_run
    block = json.loads((record / "results.json").read_text())["arms"]["eagle3"]
    assert block["repeats"] == 2
    noise = block["noise"]["output_tok_s"]
    assert set(noise) >= {"median", "min", "max", "mad", "cv"} and noise["min"] <= noise["median"] <= noise["max"]
    assert block["output_tok_s"] == pytest.approx(noise["median"], rel=1e-3)
    assert "## Noise over 2 repeats" in proc.stdout
    assert {line["repeat"] for line in read_lines(record)} == {0, 1}


@pytest.mark.slow
def test_the_record_says_how_to_reproduce_it(first_run):
    _, record, _, _, _ = first_run
    results = json.loads((record / "results.json").read_text())
    assert results["harness"]["git_commit"] and results["harness"]["git_dirty"] in (True, False)
    assert results["host"] and "+exp=sim_smoke" in results["command"]
    assert results["arms"]["eagle3"]["server_version"]
    assert results["arms"]["eagle3"]["server"]["image"]["id"].startswith("sha256:")
    assert results["arms"]["eagle3"]["gpu"]["gpus"]  # GPU names/UUIDs/idle clocks at start
    assert yaml.safe_load((record / "arms" / "eagle3" / "config.yaml").read_text())["workload"]["seed"] == 0


@pytest.mark.slow
def test_junit_xml_carries_each_gates_numbers(first_run):
    """Each gate's status, threshold and value, as the record has them. The speedup passes on a
    quiet machine; beside other tests' runs its two repeats may honestly spread more than
    gate.max_cv (seen at a load of 5: `unreliable`), and then the JUnit says that, not passed."""
    _, record, junit, _, _ = first_run
    tree = ET.parse(junit)
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    (verdict,) = [g for g in json.loads((record / "results.json").read_text())["gates"]
                  if (g["name"], g["arm"]) == ("min_speedup", "eagle3")]
    assert props["min_speedup[eagle3].status"] == verdict["status"] in ("passed", "unreliable"), verdict
    assert float(props["min_speedup[eagle3].threshold"]) == 1.1 == verdict["threshold"]
    assert float(props["min_speedup[eagle3].value"]) == pytest.approx(verdict["value"])
    assert verdict["status"] != "passed" or verdict["value"] > 1.1


@pytest.mark.slow
def test_the_summary_goes_to_the_github_step_summary(first_run):
    _, record, _, step_summary, _ = first_run
    text = step_summary.read_text()
    assert "# specgate: sim_smoke" in text and "| arm " in text
    assert text.strip() == (record / "summary.md").read_text().strip()


@pytest.mark.slow
def test_replay_reruns_the_recorded_config_and_prints_the_drift(first_run, tmp_path):
    _, record, _, _, _ = first_run
    proc = run_suites("--replay", str(record), f"record.root={tmp_path}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"replaying {record.name}" in proc.stdout and f"## Drift vs {record.name}" in proc.stdout
    new = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert new["replay_of"] == str(record)
    drift = [line for line in proc.stdout.splitlines() if line.startswith("| eagle3 |") or line.startswith("| baseline |")]
    central = [line for line in drift if line.split("|")[2].strip() in CENTRAL]
    assert central and not [line for line in central if "outside the band" in line], "\n".join(central)


@pytest.mark.slow
def test_a_regression_inside_the_run_to_run_floor_never_exits_0(first_run, tmp_path):
    """9 % slower per step: against one reference run, inside the 12 % two runs may differ by,
    so no failure can be proven; but it is no pass either: undecided, exit status 6, the
    summary's first line saying so and what would decide it (or, where a busy machine
    stretched it past the floor, failed: 1)."""
    _, record, _, _, _ = first_run
    proc = run_suites("--replay", str(record), "server.sim.decode_step_ms=4.36", f"gate.baseline={record}",
                      f"record.root={tmp_path}", "-k", "baseline and not eagle3")
    assert proc.returncode in (1, 6), proc.stdout[-3000:]
    if proc.returncode == 6:
        summary = (tmp_path / "latest" / "summary.md").read_text()
        assert "Undecided: " in summary and "an A/B decides it (specgate ab" in summary, summary[:2000]
        verdicts = json.loads((tmp_path / "latest" / "results.json").read_text())["gates"]
        assert any(v["undecided"] and v["status"] == "inconclusive" for v in verdicts), verdicts


@pytest.mark.slow
def test_a_slower_server_fails_the_baseline_gate_naming_the_regression(first_run, tmp_path):
    _, record, _, _, _ = first_run
    # 50 % slower. One run against one reference run fails only beyond gate.run_to_run_floor
    # (12 %), with its interval: a 20 % slower step was inconclusive on a busy machine (its
    # interval reached below 12 % with the two runs measured under different loads), where
    # the test is about naming a regression, not about the smallest one a busy box can see
    proc = run_suites("--replay", str(record), "server.sim.decode_step_ms=6.0", f"gate.baseline={record}",
                      f"record.root={tmp_path}", "-k", "baseline and not eagle3")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "baseline: tpot_ms.p50 regressed: tpot_ms.p50" in proc.stdout and "95% interval" in proc.stdout
    verdicts = json.loads((tmp_path / "latest" / "results.json").read_text())["gates"]
    compared = {v["name"]: v for v in verdicts if v["arm"] == "baseline" and v["name"].startswith("baseline.")}
    for name in ("baseline.tpot_ms.p50", "baseline.itl_ms.p50"):  # the decode step's own figures, 50 % slower
        v = compared[name]
        assert 0.35 < v["value"] / v["baseline"] - 1 < 0.65, v
        assert 0.0 < v["interval"][0] <= v["interval"][1], v  # the regression's interval, all of it worse
    assert compared["baseline.tpot_ms.p50"]["status"] == "failed"
    # an ITL is the gap between chunks, which a starved client stretches: where either run was
    # client-bound (a busy machine, its reference run), the harness says so instead of failing
    itl = compared["baseline.itl_ms.p50"]
    assert itl["status"] == "failed" or (itl["status"] == "inconclusive" and "client-bound" in itl["detail"]), itl
    # Throughput is about a third lower too (the prefill is not slower); its verdict depends
    # on the noise band, the spread of both runs' two repeats, and the floor.
    tok = compared["baseline.output_tok_s"]
    assert 0.2 < 1 - tok["value"] / tok["baseline"] < 0.45, tok


@pytest.mark.slow
def test_replay_says_when_todays_conf_differs_and_refuses_group_switches(first_run, tmp_path):
    _, record, _, _, _ = first_run
    copy = tmp_path / "record"
    subprocess.run(["cp", "-r", str(record), str(copy)], check=True)
    arm_cfg = copy / "arms" / "baseline" / "config.yaml"
    cfg = yaml.safe_load(arm_cfg.read_text())
    cfg["server"]["sim"]["decode_step_ms"] = 5.0
    arm_cfg.write_text(yaml.safe_dump(cfg))
    proc = run_suites("--replay", str(copy), "--collect-only")
    assert "conf/ has changed since the recording for arm 'baseline': server.sim.decode_step_ms: 5.0 recorded, 4.0 today" in proc.stdout
    bad = run_suites("--replay", str(copy), "workload=chat_short")
    assert bad.returncode == 4 and "replay cannot switch the group 'workload'" in bad.stderr


@pytest.mark.parametrize("name, content, why", [
    ("nope", None, "it does not exist"),
    ("empty.json", "{}", "it has no 'arms' mapping"),  # used to be a skipped gate and exit 0
    ("sweep.json", '{"record_kind": "sweep", "experiment": "x", "points": []}', "it is a sweep record's sweep.json"),
])
def test_a_reference_run_that_is_not_a_record_stops_the_run_in_one_sentence(tmp_path, name, content, why):
    reference = tmp_path / name
    if content is not None:
        reference.write_text(content)
    proc = run_suites("+exp=sim_smoke", f"gate.baseline={reference}", f"record.root={tmp_path / 'runs'}", "--collect-only")
    assert proc.returncode == 4
    assert f"gate.baseline: {reference} is not a run record: {why}" in proc.stderr


@pytest.mark.slow
def test_a_reference_run_of_another_workload_stops_the_run_unless_told_to_warn(first_run, tmp_path):
    _, record, _, _, _ = first_run
    other = ("workload.max_tokens=7", f"gate.baseline={record}", f"record.root={tmp_path}", "--collect-only")
    proc = run_suites("+exp=sim_smoke", *other)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert (f"gate.baseline: the reference run {record.name} measured arm 'baseline' differently "
            "(and 1 other arm(s)): workload.max_tokens:") in proc.stderr
    assert "gate.baseline_mismatch=warn" in proc.stderr and not list(tmp_path.iterdir())
    warned = run_suites("+exp=sim_smoke", *other, "gate.baseline_mismatch=warn")
    assert warned.returncode == 0, warned.stderr[-2000:]
    assert "specgate: gate.baseline_mismatch=warn: comparing anyway" in warned.stdout
    same = run_suites("+exp=sim_smoke", "workload.num_prompts=3", f"gate.baseline={record}", "--collect-only")
    assert same.returncode == 0, same.stderr[-2000:]  # fewer requests measure the same thing


@pytest.mark.slow
def test_a_full_run_evaluates_every_configured_gate(first_run):
    _, record, _, _, _ = first_run
    assert json.loads((record / "results.json").read_text())["gates_not_evaluated"] == []
    assert "NOT evaluated" not in (record / "summary.md").read_text()


@pytest.mark.slow
def test_gates_of_a_suite_that_did_not_run_are_listed_not_silent(tmp_path):
    proc = run_suites("+exp=sim_smoke", "workload.num_prompts=2", f"record.root={tmp_path}",
                      path="suites/test_throughput.py")
    assert proc.returncode == 0, proc.stdout[-2000:]
    results = json.loads((tmp_path / "latest" / "results.json").read_text())
    missing = {(g["name"], g["arm"]) for g in results["gates_not_evaluated"]}
    assert ("min_speedup", "eagle3") in missing and ("min_accept_length", "eagle3") in missing
    assert ("min_speedup", "baseline") not in missing  # baseline is only the arm compared with
    assert not any(name == "min_output_tok_s" for name, _ in missing)  # its suite ran
    assert "configured gate(s) were NOT evaluated" in proc.stdout
    [listed] = [line for line in proc.stdout.splitlines() if line.startswith("- suites/test_speculative.py: ")]
    assert "min_accept_length [eagle3]" in listed and "min_speedup [eagle3]" in listed


@pytest.mark.slow
def test_a_replay_of_a_torn_results_json_stops_before_any_server_starts(first_run, tmp_path):
    _, record, _, _, _ = first_run
    copy = tmp_path / "record"
    subprocess.run(["cp", "-r", str(record), str(copy)], check=True)
    text = (copy / "results.json").read_text()
    (copy / "results.json").write_text(text[: len(text) // 2])  # cut in half: not JSON
    new_root = tmp_path / "new"
    proc = run_suites("--replay", str(copy), f"record.root={new_root}", refused=True)
    assert proc.returncode == 4, proc.stdout[-3000:]
    assert f"specgate: --replay: {copy / 'results.json'} is not a readable run record" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not new_root.exists(), "a record was written for a replay that never started"


@pytest.mark.slow
def test_a_replay_whose_dataset_changed_since_the_recording_stops_in_one_sentence(first_run, tmp_path):
    import hashlib
    import yaml
    _, record, _, _, _ = first_run
    copy, dataset = tmp_path / "record", tmp_path / "prompts.jsonl"
    subprocess.run(["cp", "-r", str(record), str(copy)], check=True)
    dataset.write_text('{"prompt": "count to ten"}\n')
    digest = hashlib.sha256(dataset.read_bytes()).hexdigest()
    for config in [copy / "config.yaml", *copy.glob("arms/*/config.yaml")]:  # the run as if it had sent the dataset
        data = yaml.safe_load(config.read_text())
        data["workload"]["dataset"] = str(dataset)
        config.write_text(yaml.safe_dump(data))
    results = json.loads((copy / "results.json").read_text())
    for block in results["arms"].values():
        block["identity"]["workload.dataset_sha256"] = digest
    (copy / "results.json").write_text(json.dumps(results))
    assert run_suites("--replay", str(copy), "--collect-only").returncode == 0  # the same file: it replays
    dataset.write_text('{"prompt": "write a long story"}\n')  # the same path, other prompts
    proc = run_suites("--replay", str(copy), "--collect-only", refused=True)
    assert proc.returncode == 4
    assert f"--replay: workload.dataset {dataset} has changed since the recording (sha256 {digest[:12]}..." in proc.stderr


def write_results(path: Path, **data) -> Path:
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"arms": {}, **data}))
    return path


def test_a_reference_run_that_died_stops_the_run_in_one_sentence(tmp_path):
    dead = write_results(tmp_path / "20261201T000000Z_sim_smoke", status="running")
    proc = run_suites("+exp=sim_smoke", f"gate.baseline={dead}", f"record.root={tmp_path / 'new'}", "--collect-only")
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert (f"specgate: gate.baseline: {dead} is incomplete: it still says running, so the run died before it "
            "finished (e.g. kill -9); a reference run must have finished.") in proc.stderr


def test_a_history_baseline_leaves_out_runs_that_did_not_finish_and_says_so(tmp_path):
    history = tmp_path / "main"
    # the finished member measured the arms (a reference with none is refused on its own: exit 4)
    write_results(history / "20261201T000000Z_sim_smoke", status="finished",
                  arms={"baseline": {"status": "measured"}, "eagle3": {"status": "measured"}})
    write_results(history / "20261201T000001Z_sim_smoke", status="running")
    proc = run_suites("+exp=sim_smoke", f"gate.baseline={history}", f"record.root={tmp_path / 'new'}", "--collect-only")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (f"specgate: gate.baseline: left out 1 unfinished record(s) of {history}: "
            "20261201T000001Z_sim_smoke") in proc.stdout
