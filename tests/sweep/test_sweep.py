"""`specgate sweep`: Hydra's sweep syntax expands to points, every point is checked before a
server starts, each point runs as a whole experiment with its own record inside the sweep's."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from harness import cli

from harness.secrets import fingerprint
from harness.record.secrets import Redactor
from harness.sweep import point as sweep
from harness.config.compose import ConfigError, sweep_points
from harness.run.compose import compose
from harness.sweep.record import failed_gates, headline
from harness.sweep.report import verdict
from tests.support.runs import run_suites, specgate

ROOT = Path(__file__).resolve().parents[2]
SIM = ["+exp=sim_smoke", "backend=process", "workload.num_prompts=2", "workload.max_tokens=16"]


def test_comma_lists_range_and_choice_expand_as_hydra_multirun():
    points = sweep_points(["+exp=sim_smoke", "workload.concurrency=1,4", "drafter.num_steps=range(2,6,2)",
                           "workload.max_tokens=choice(8,16)"])
    assert len(points) == 8  # 2 x 2 x 2, the first key changing slowest
    assert points[0].overrides == ["+exp=sim_smoke", "workload.concurrency=1", "drafter.num_steps=2",
                                   "workload.max_tokens=8"]
    assert points[-1].swept == ["workload.concurrency=4", "drafter.num_steps=4", "workload.max_tokens=16"]
    assert [sweep.label(n, p, Redactor()) for n, p in enumerate(points)][:3] == [
        "0_concurrency-1_num_steps-2_max_tokens-8", "1_concurrency-1_num_steps-2_max_tokens-16",
        "2_concurrency-1_num_steps-4_max_tokens-8"]


def test_overrides_that_sweep_nothing_are_kept_as_written():
    (point,) = sweep_points(["+exp=sim_smoke", "~gate.baseline", "workload.max_tokens=16"])
    assert point.overrides == ["+exp=sim_smoke", "~gate.baseline", "workload.max_tokens=16"]
    assert point.swept == [] and sweep.label(0, point, Redactor()) == "0"


def test_a_key_swept_twice_takes_hydras_last_sweep_once():
    points = sweep_points(["workload.concurrency=1,2", "workload.max_tokens=8", "workload.concurrency=choice(4)"])
    assert [p.overrides for p in points] == [["workload.concurrency=4", "workload.max_tokens=8"]]


def test_pytest_options_are_told_from_overrides_for_every_point():
    tokens = ["+exp=sim_smoke", "-k", "eagle3", "workload.concurrency=1,2", "-o", "a=b", "-v"]
    assert cli.split_tokens(tokens) == (["+exp=sim_smoke", "workload.concurrency=1,2"],
                                        ["-k", "eagle3", "-o", "a=b", "-v"])


def test_a_sweep_given_to_pytest_says_to_use_specgate_sweep():
    with pytest.raises(ConfigError, match=r"workload.concurrency=1,4 gives several values .*specgate sweep` \(or pytest --multirun\)"):
        compose(["+exp=sim_smoke", "workload.concurrency=1,4"])


def test_a_bad_value_in_one_point_exits_4_before_any_server(tmp_path, capsys):
    root = tmp_path / "runs"
    status = cli.main(["sweep", *SIM, "workload.concurrency=1,0", f"record.root={root}"])
    err = capsys.readouterr().err.strip()
    assert status == 4
    assert err == "specgate: sweep point 1 (workload.concurrency=0): workload.concurrency must be a finite number >= 1 and <= 100000, got 0"
    assert not root.exists()  # no sweep folder, no point record: nothing started


def test_record_root_cannot_be_swept(tmp_path, capsys):
    status = cli.main(["sweep", *SIM, f"record.root={tmp_path}/a,{tmp_path}/b"])
    assert status == 4 and "record.root cannot be swept" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_headline_reads_each_arms_figures_and_gate_counts():
    results = {"plain_arm": "baseline", "arms": {
        "baseline": {"status": "measured", "output_tok_s": 250.0, "ttft_ms": {"p50": 3.0, "p99": 9.0}},
        "eagle3": {"status": "measured", "output_tok_s": 320.0, "tpot_ms": {"p50": 3.1, "p99": 3.5},
                   "accept_length": 2.4, "verify_cycle_ms": 7.5, "speedup_vs_baseline": 1.28,
                   "break_even_accept_length_vs_baseline": 1.875}},
        "gates": [{"arm": "eagle3", "status": "passed"}, {"arm": "eagle3", "status": "failed"},
                  {"arm": "eagle3", "status": "skipped"}, {"arm": "baseline", "status": "passed"}]}
    arms = headline(results)  # keyed by the metric registry's paths, one spelling everywhere
    assert arms["eagle3"]["speedup"] == 1.28 and arms["eagle3"]["break_even_accept_length"] == 1.875
    assert arms["eagle3"]["tpot_ms.p99"] == 3.5 and arms["eagle3"]["ttft_ms.p50"] is None
    assert (arms["eagle3"]["gates_passed"], arms["eagle3"]["gates_failed"]) == (1, 1)
    assert arms["baseline"]["ttft_ms.p99"] == 9.0 and arms["baseline"]["speedup"] is None
    assert (arms["baseline"]["gates_passed"], arms["baseline"]["gates_failed"]) == (1, 0)


def test_a_point_that_failed_a_gate_says_which_in_the_sweeps_verdict():
    # a point that exited 1 on a busy CI box once said only "exited 1": its gates are named now
    results = {"gates": [{"arm": "eagle3", "name": "max_itl_ms.p50", "status": "failed",
                          "detail": "ITL p50 11.2 ms > 10 ms"},
                         {"arm": "eagle3", "name": "lossless", "status": "passed", "detail": "identical"}]}
    assert failed_gates(results) == ["eagle3: max_itl_ms.p50 (ITL p50 11.2 ms > 10 ms)"]
    points = [{"label": "0_c-1", "exit_status": 0},
              {"label": "1_c-2", "exit_status": 1, "failed_gates": failed_gates(results)}]
    said = verdict({"status": "finished"}, points, [])
    assert said == {"status": "failed", "text": "FAILED: 1 point(s) exited non-zero; "
                                                "point 1_c-2 failed eagle3: max_itl_ms.p50 (ITL p50 11.2 ms > 10 ms)"}


def test_a_sweep_json_written_before_reads_under_its_old_spellings():
    from harness.sweep.record import summary
    from harness.sweep.report import figure_of, table_rows

    old = {"status": "measured", "ttft_ms_p50": 3.25, "break_even": 1.875, "speedup": 1.28}
    assert figure_of(old, "ttft_ms.p50") == 3.25 and figure_of(old, "break_even_accept_length") == 1.875
    points = [{"label": "0_c1", "exit_status": 0, "arms": {"eagle3": old}}]
    [row] = table_rows(points)
    assert "3.2" in row["cells"] and "1.88" in row["cells"] and "1.28x" in row["cells"]
    text = summary({"experiment": "x", "status": "finished", "exit_status": 0, "points": points})
    assert "| 1.88 " in text and "| 1.28x " in text


def test_ctrl_c_stops_the_running_point_and_waits_for_it(tmp_path):
    """The point gets one SIGINT from the sweep and its status comes back; nothing is left."""
    marker = tmp_path / "stopped"
    script = (f"import signal, sys, time, pathlib\n"
              f"def stopped(*_): pathlib.Path({str(marker)!r}).write_text('x'); sys.exit(2)\n"
              f"signal.signal(signal.SIGINT, stopped)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        status, interrupted = sweep.run_point([sys.executable, "-c", script])
    finally:
        timer.cancel()
    assert (status, interrupted) == (2, True) and marker.read_text() == "x"


def test_an_interrupted_point_ends_the_sweep_as_interrupted(tmp_path, monkeypatch):
    ran = []

    def interrupted_point(command):
        ran.append(command)
        return 2, True
    monkeypatch.setattr(sweep, "run_point", interrupted_point)
    status = cli.main(["sweep", *SIM, "workload.concurrency=1,2", f"record.root={tmp_path}"])
    (sweep_dir,) = tmp_path.iterdir()
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert status == 2 and len(ran) == 1  # the second point never started
    assert (data["status"], data["exit_status"]) == ("interrupted", 2)
    assert [p["exit_status"] for p in data["points"]] == [2, None]
    assert "status **interrupted**" in (sweep_dir / "summary.md").read_text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_sweep_started_with_ctrl_c_ignored_still_stops_on_it_and_on_sigterm(tmp_path, monkeypatch, signum):
    # a shell's background job or a script's child inherits SIGINT ignored (harness/interrupts.py)
    ran = []

    def signalled_point(command):
        ran.append(command)
        os.kill(os.getpid(), signum)
        time.sleep(0.25)  # the handler runs here, if there is one (kill() delivers before it returns)
        return 0, False
    monkeypatch.setattr(sweep, "run_point", signalled_point)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = cli.main(["sweep", *SIM, "workload.concurrency=1,2", f"record.root={tmp_path}"])
        assert signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # put back
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    (sweep_dir,) = tmp_path.iterdir()
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert status == 2 and len(ran) == 1, data  # the second point never started
    assert (data["status"], data["exit_status"]) == ("interrupted", 2)


@pytest.mark.slow
def test_two_points_on_the_simulator_each_a_whole_experiment(tmp_path):
    runs = tmp_path / "runs"
    secret = "hf_basicsweepsecret0123456789"
    junit = tmp_path / "sweep.xml"
    done = specgate("sweep", *SIM, "workload.concurrency=1,2", f"+server.env.HF_TOKEN={secret}", f"record.root={runs}",
                    "-p", "no:cacheprovider", "--no-progress", f"--junitxml={junit}", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = runs.iterdir()
    # one JUnit per point and one for the sweep holding them all (it used to keep the last point only)
    import xml.etree.ElementTree as ET
    names = [s.get("name") for s in ET.parse(junit).getroot()]
    assert len(names) == 3 and names[0].startswith("point 0_") and names[1].startswith("point 1_"), names
    assert all((sweep_dir / "points" / p["label"] / "junit.xml").is_file() for p in json.loads(
        (sweep_dir / "sweep.json").read_text())["points"])
    assert secret.encode() not in junit.read_bytes()
    # a secret override reaches the points but no file of the sweep (sweep.json keeps the overrides)
    assert f"+server.env.HF_TOKEN={fingerprint(secret)}" in (sweep_dir / "sweep.json").read_text()
    assert [f for f in sweep_dir.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()] == []
    assert secret not in done.stdout + done.stderr
    assert sweep_dir.name.endswith("_sim_smoke_sweep")
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert (data["status"], data["exit_status"]) == ("finished", 0)
    assert [p["label"] for p in data["points"]] == ["0_concurrency-1", "1_concurrency-2"]
    for point, concurrency in zip(data["points"], (1, 2)):
        assert point["exit_status"] == 0 and point["status"] == "finished"
        assert f"workload.concurrency={concurrency}" in point["overrides"]
        assert point["overrides"][-1] == f"record.root='{sweep_dir / 'points' / point['label']}'"
        record = sweep_dir / point["record"]
        assert record.parent == sweep_dir / "points" / point["label"]
        results = json.loads((record / "results.json").read_text())
        assert results["status"] == "finished" and (record / "summary.md").is_file()
        assert set(point["arms"]) == {"baseline", "eagle3"}
        eagle3 = point["arms"]["eagle3"]
        assert eagle3["output_tok_s"] > 0 and eagle3["accept_length"] > 1 and eagle3["speedup"] is not None
        assert eagle3["gates_passed"] > 0 and eagle3["gates_failed"] == 0
    summary = (sweep_dir / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| 0_") or line.startswith("| 1_")]
    assert len(rows) == 4 and "status **finished**, exit status 0" in summary


@pytest.mark.slow
def test_pytest_multirun_runs_the_sweep(tmp_path):
    """`pytest suites/ ... --multirun k=1,2` is `specgate sweep`: one pytest per point, the sweep's
    record and exit status; pytest options (-k ARM) reach every point."""
    runs = tmp_path / "runs"
    done = run_suites(*SIM, "workload.concurrency=1,2", "--multirun", "-k", "baseline", f"record.root={runs}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = runs.iterdir()
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert (data["status"], data["exit_status"]) == ("finished", 0)
    assert [p["swept"] for p in data["points"]] == [["workload.concurrency=1"], ["workload.concurrency=2"]]
    assert all(set(p["arms"]) == {"baseline", "eagle3"} and p["arms"]["eagle3"]["status"] == "not_run"
               for p in data["points"])  # -k baseline: the one arm, in every point


def test_pytest_multirun_with_a_bad_point_exits_4_before_any_server(tmp_path):
    done = run_suites(*SIM, "workload.concurrency=1,0", "--multirun", f"record.root={tmp_path}", timeout=120,
                      refused=True)
    assert done.returncode == 4
    assert "sweep point 1 (workload.concurrency=0)" in done.stderr
    assert not any(tmp_path.iterdir())


def test_the_crossover_is_where_the_speedup_falls_below_one():
    from harness.sweep.record import crossovers

    def point(c, k, speedup):
        return {"swept": [f"workload.concurrency={c}", f"drafter.num_steps={k}"],
                "arms": {"baseline": {"concurrency": c, "speedup": None},
                         "eagle3": {"concurrency": c, "speedup": speedup}}}

    points = [point(1, 2, 1.6), point(4, 2, 1.3), point(16, 2, 0.9), point(64, 2, 0.6),
              point(1, 4, 1.8), point(4, 4, 1.5), point(16, 4, 1.1), point(64, 4, 1.05)]
    found = {tuple(x["with"]): x for x in crossovers(points)}
    k2 = found[("drafter.num_steps=2",)]
    # between 4 (1.3x) and 16 (0.9x): 3/4 of the way in log2, 2^(2 + 0.75 * 2) = 11.3
    assert k2["arm"] == "eagle3" and k2["pays_through"] == pytest.approx(11.3, abs=0.05)
    assert k2["words"] == "pays up to concurrency ~11.3 (1.30x at 4, 0.90x at 16)"
    k4 = found[("drafter.num_steps=4",)]
    assert k4["pays_through"] == 64 and k4["words"] == "pays at every concurrency swept, up to 64 (1.05x there)"
    losing = crossovers([point(1, 2, 0.8), point(8, 2, 0.7)])
    assert losing[0]["pays_through"] is None and "does not pay even at concurrency 1" in losing[0]["words"]
    assert crossovers([point(1, 2, 1.5)]) == []  # one concurrency: nothing to cross


def test_a_sweeps_junitxml_becomes_one_file_per_point_and_one_merged_file(tmp_path):
    from harness.sweep.junit import junit_target, write_sweep_junit
    from harness.sweep.point import point_command, point_overrides
    assert junit_target(["-q", "--junitxml", "out.xml", "-v"]) == (Path("out.xml"), ["-q", "-v"])
    assert junit_target(["--junit-xml=o.xml"]) == (Path("o.xml"), [])
    overrides = point_overrides(["+exp=sim_smoke"], tmp_path / "points" / "0_c-1")
    command = point_command(overrides, Path("conf"), ["--junitxml=sweep.xml", "-q"])
    assert f"--junitxml={tmp_path / 'points' / '0_c-1' / 'junit.xml'}" in command and "--junitxml=sweep.xml" not in command
    (tmp_path / "points" / "0_c-1").mkdir(parents=True)
    (tmp_path / "points" / "0_c-1" / "junit.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="2"><testcase classname="suites.test_throughput" name="t1"/>'
        '<testcase classname="suites.test_throughput" name="t2"><failure message="too slow"/></testcase>'
        '</testsuite></testsuites>')
    entries = [{"label": "0_c-1", "exit_status": 1}, {"label": "1_c-2", "exit_status": None, "error": "never started"}]
    verdicts = [{"name": "crossover_at_least", "arm": "eagle3", "status": "failed", "detail": "crosses at 1"}]
    target = tmp_path / "sweep.xml"
    write_sweep_junit(target, tmp_path / "points", entries, verdicts, str)
    import xml.etree.ElementTree as ET
    suites = {s.get("name"): s for s in ET.parse(target).getroot()}
    assert list(suites) == ["point 0_c-1: pytest", "point 1_c-2", "sweep gates"]
    assert suites["point 0_c-1: pytest"].get("failures") == "1"  # a red point stays red
    assert suites["point 1_c-2"].get("errors") == "1" and "never started" in ET.tostring(suites["point 1_c-2"], "unicode")
    assert suites["sweep gates"].get("failures") == "1"


@pytest.mark.parametrize("statuses, gate_failed, expected", [
    ([0, 0], False, 0), ([0, 6], False, 6), ([6, 1], False, 1), ([0, 6], True, 1), ([0, None], False, 1),
])
def test_a_point_left_undecided_makes_the_sweep_undecided_never_passed(statuses, gate_failed, expected):
    from harness.sweep.finish import sweep_status

    assert sweep_status(statuses, gate_failed) == expected
