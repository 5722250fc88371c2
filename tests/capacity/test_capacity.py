"""`specgate capacity`: the search (on synthetic functions), SLOs and goodput, the gate, config
errors (exit 4, one sentence, nothing started), and the simulator's known capacity found
within 10 % by a real search on real servers, one server per arm; Ctrl-C leaves nothing."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest

from harness import cli
from harness.capacity.search import CapacityConfigError, SearchSettings, search
from harness.gates.registry import CapacityContext, judge
from harness.capacity.driver import probe_workload
from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.engines import engine_of
from harness.load import LoadResult, RequestRecord
from harness.measure.metrics import ArmResult, Stat
from harness.servers.labels import RECORD
from harness.sim.cli import parse_args as sim_parse_args
from harness.sim.model import SimModel
from harness.capacity.slo import Slo, goodput, misses, slos_of
from harness.record.requests import read_lines
from tests.support.runs import as_a_background_job, require_whole_run_marker, specgate, start_specgate
from harness.servers.labels import labelled_containers

ROOT = Path(__file__).resolve().parents[2]
EXP = "+exp=sim_capacity"


def settings(**changes) -> SearchSettings:
    base = dict(dimension="concurrency", start=1, max=256, growth=2.0, tolerance=0.05, rounds=2, probe_s=20.0,
                max_in_flight=1024)
    return SearchSettings.of(SimpleNamespace(**{**base, **changes}))


# --- the search, on synthetic monotone functions ---------------------------------------------


def test_concurrency_grows_then_bisects_on_integers_to_the_last_load_that_meets():
    result = search(lambda c: c <= 37, settings())
    assert (result.capacity, result.first_miss, result.reached_max) == (37, 38, False)
    assert [load for load, _ in result.probed] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert all(isinstance(load, int) for load, _ in result.probed)


def test_request_rate_bisects_to_the_relative_tolerance():
    result = search(lambda r: r <= 3.3, settings(dimension="request_rate", start=0.5, max=100, tolerance=0.02))
    assert result.capacity <= 3.3 < result.first_miss
    assert result.first_miss - result.capacity <= 0.02 * result.capacity
    assert 3.3 * 0.98 <= result.capacity


def test_a_first_load_that_misses_gives_no_capacity_and_one_probe():
    result = search(lambda c: False, settings(start=4))
    assert (result.capacity, result.first_miss, result.probed) == (None, 4, [(4, False)])


def test_never_missing_up_to_max_is_a_lower_bound_at_max():
    result = search(lambda c: True, settings(max=50))
    assert (result.capacity, result.reached_max) == (50, True)
    assert [load for load, _ in result.probed] == [1, 2, 4, 8, 16, 32, 50]  # the last step is capped at max


@pytest.mark.parametrize("changes, words", [
    ({"dimension": "tokens"}, "capacity.dimension 'tokens' is unknown; valid: concurrency, request_rate"),
    ({"start": 0}, "capacity.start must be a whole number ≥ 1 for concurrency, got 0"),
    ({"start": 1.5}, "capacity.start must be a whole number ≥ 1 for concurrency, got 1.5"),
    ({"max": 0.5, "start": 1}, "capacity.max must be a whole number at least capacity.start (1), got 0.5"),
    ({"growth": 1.0}, "capacity.growth must be > 1"),
    ({"dimension": "request_rate", "tolerance": 0}, "capacity.tolerance is a fraction of the load in (0, 1)"),
    ({"rounds": 0}, "capacity.rounds must be ≥ 1, got 0 (a probe must be the load it names)"),
    ({"probe_s": 0}, "capacity.probe_s must be > 0"),
    ({"max_in_flight": 0}, "capacity.max_in_flight must be ≥ 1"),
])
def test_settings_that_cannot_make_a_search_say_why(changes, words):
    with pytest.raises(CapacityConfigError) as raised:
        settings(**changes)
    assert str(raised.value).startswith(words)


# --- SLOs, goodput, the probe's workload ------------------------------------------------------


def record(ttft_s: float, gaps: list[float], tokens_per_chunk: int = 1) -> RequestRecord:
    chunks = [ttft_s]
    for gap in gaps:
        chunks.append(chunks[-1] + gap)
    return RequestRecord(index=0, warmup=False, send_time=0.0, chunk_times=chunks, status=200,
                         chunk_tokens=[tokens_per_chunk] * len(chunks), completion_tokens=len(chunks) * tokens_per_chunk,
                         end_time=chunks[-1])


def test_a_probe_misses_each_slo_its_figures_exceed_and_one_not_measured():
    result = ArmResult.of("a", tpot_ms=Stat(mean=20.0, p50=19.0, p90=22.0, p99=30.0, n=5))
    slos = [Slo("tpot_ms", "p99", 25.0), Slo("tpot_ms", "p50", 25.0), Slo("ttft_ms", "p99", 100.0)]
    assert misses(result, slos) == ["tpot_ms.p99 30.00 ms > 25 ms", "ttft_ms.p99 not measured (limit 100 ms)"]


def test_goodput_counts_the_requests_within_every_limit_over_the_window():
    fast, slow_decode, slow_start = record(0.05, [0.01] * 10), record(0.05, [0.03] * 10), record(0.5, [0.01] * 10)
    failed = RequestRecord(index=3, warmup=False, status=500, error="boom")
    warmup = RequestRecord(index=4, warmup=True, send_time=0.0, chunk_times=[0.01], status=200,
                           completion_tokens=1, end_time=0.01)
    load = LoadResult([fast, slow_decode, slow_start, failed, warmup], start_time=0.0, end_time=2.0, api="chat", model="m")
    slos = [Slo("tpot_ms", "p99", 20.0), Slo("ttft_ms", "p50", 100.0), Slo("ttft_ms", "p99", 200.0)]
    assert goodput(load, slos) == (1, 0.5)  # only `fast`: 1 request in the 2 s window
    assert goodput(load, [Slo("itl_ms", "p99", 20.0)]) == (2, 1.0)  # slow_decode's own gaps are 30 ms


def test_slos_are_read_from_the_composed_config_in_a_fixed_order():
    experiment = compose([EXP, "slo.ttft_ms.p99=500", "slo.e2e_ms.mean=2000"])
    assert [s.name for s in slos_of(experiment.base)] == ["ttft_ms.p99", "tpot_ms.p99", "e2e_ms.mean"]


def test_a_probe_is_the_arms_workload_at_its_load():
    experiment = compose([EXP, "workload.num_prompts=4", "capacity.rounds=3"])
    cfg = experiment.arm("baseline").cfg
    first = probe_workload(cfg.workload, cfg.capacity, 8, first=True)
    assert (first.concurrency, first.num_prompts, first.request_rate, first.warmup_requests) == (8, 24, None, 1)
    later = probe_workload(cfg.workload, cfg.capacity, 1, first=False)
    assert (later.num_prompts, later.warmup_requests) == (4, 0)  # never fewer than the workload's own
    rate = compose([EXP, "capacity.dimension=request_rate", "capacity.probe_s=10"]).arm("baseline").cfg
    open_loop = probe_workload(rate.workload, rate.capacity, 2.5, first=True)
    assert (open_loop.request_rate, open_loop.num_prompts, open_loop.concurrency) == (2.5, 25, 1024)


# --- the gate ---------------------------------------------------------------------------------


def searched(name: str, capacity, reached_max: bool = False, status: str = "finished"):
    return SimpleNamespace(name=name, capacity=capacity, reached_max=reached_max, status=status)


def gate(**spec):
    return {"min_capacity": {"eagle3": SimpleNamespace(**{"over": None, "ratio": 1.0, "at_least": None, **spec})}}


def capacity_verdicts(gate_cfg, found, search: SearchSettings):
    """The registry's capacity gates, as `specgate capacity` asks for them."""
    unit = "concurrent requests" if search.integer else "req/s"
    return judge("capacity", CapacityContext(gate_cfg, found, unit, search.start))


def test_min_capacity_compares_with_another_arm_and_a_floor():
    found = {"baseline": searched("baseline", 12), "eagle3": searched("eagle3", 17)}
    floor, ratio = capacity_verdicts(gate(over="baseline", ratio=1.2, at_least=20), found, settings())
    assert (ratio.passed, ratio.value, ratio.threshold) == (True, 17, pytest.approx(14.4))
    assert (floor.passed, floor.value, floor.threshold) == (False, 17, 20)
    assert floor.detail == "eagle3: capacity 17 concurrent requests is below the floor 20"
    assert floor.scope == "capacity" and floor.line() == f"FAILED min_capacity eagle3: {floor.detail}"
    (beaten,) = capacity_verdicts(gate(over="baseline", ratio=1.5), found, settings())
    assert beaten.passed is False and "needs ≥ 18" in beaten.detail


def test_min_capacity_cannot_pass_on_a_bound_nor_on_an_arm_not_measured():
    bound = {"baseline": searched("baseline", 64, reached_max=True), "eagle3": searched("eagle3", 64, reached_max=True)}
    (undecided,) = capacity_verdicts(gate(over="baseline"), bound, settings(max=64))
    assert undecided.passed is False and "cannot tell: baseline reached capacity.max" in undecided.detail
    died = {"baseline": searched("baseline", 12), "eagle3": searched("eagle3", None, status="server_died")}
    (verdict,) = capacity_verdicts(gate(over="baseline"), died, settings())
    assert verdict.passed is False and "search ended server_died" in verdict.detail


def test_min_capacity_must_name_arms_of_the_experiment_at_compose_time():
    with pytest.raises(ConfigError, match=r"^gate.min_capacity names arm 'eagle4', which is not an arm; arms: "
                                          r"baseline, eagle3$"):
        compose([EXP, "+gate.min_capacity.eagle4={over: baseline}"])
    with pytest.raises(ConfigError, match=r"^gate.min_capacity.eagle3 needs `over` \(another arm, with `ratio`\) or "
                                          r"`at_least` \(a floor\)$"):
        compose([EXP, "gate.min_capacity.eagle3.over=null"])


# --- config errors: exit 4, one sentence, nothing started -------------------------------------


@pytest.mark.parametrize("overrides, sentence", [
    (["slo.ttft_mz.p99=500"], "slo.ttft_mz: no such key in 'slo'; valid keys: e2e_ms, itl_ms, tpot_ms, ttft_ms "
                              "(did you mean 'ttft_ms'?)"),
    (["slo.tpot_ms.p95=50"], "slo.tpot_ms.p95: no such key in 'slo.tpot_ms'; valid keys: mean, p50, p90, p99 "
                             "(did you mean 'p99'?)"),
    (["slo.tpot_ms.p99=null"], "specgate capacity needs at least one SLO, e.g. slo.tpot_ms.p99=50 (metrics: ttft_ms, "
                           "tpot_ms, itl_ms, e2e_ms; statistics: mean, p50, p90, p99)"),
    (["slo.tpot_ms.p99=0"], "slo.tpot_ms.p99 must be a finite number > 0 (e.g. 50), got 0"),
    (["capacity.dimension=tokens"], "capacity.dimension 'tokens' is unknown; valid: concurrency, request_rate"),
    (["gate.min_capacity.eagle3.over=eagle4"], "gate.min_capacity.eagle3.over must name another arm, got 'eagle4'; "
                                               "arms: baseline, eagle3"),
    (["gate.min_capacity.eagle3.over=null"], "gate.min_capacity.eagle3 needs `over` (another arm, with `ratio`) or "
                                             "`at_least` (a floor)"),
    (["arms.eagle3=['drafter=eagle3_k25','slo.tpot_ms.p99=30']"],
     "arm 'eagle3' sets its own slo.*; set slo for the whole experiment, so every arm is held to the same search"),
])
def test_a_config_mistake_exits_4_in_one_sentence_before_any_server(tmp_path, capsys, overrides, sentence):
    root = tmp_path / "runs"
    status = cli.main(["capacity", EXP, *overrides, f"record.root={root}"])
    err = capsys.readouterr().err
    assert status == 4
    assert err == f"specgate: {sentence}\n"
    assert not root.exists()  # the record is made before the first server: nothing started


# --- the simulator's known capacity -----------------------------------------------------------


def true_capacity(arm, limit_ms: float, maximum: int) -> int:
    """The largest concurrency whose per-token time meets the limit, from the timing model the
    arm's server is started with (its own flags, parsed as the simulator parses them). Every
    request generates max_tokens: the first from prefill, the rest in steps, or in cycles of
    exactly the accept length when the drafter is always right (sim_capacity's)."""
    flags = engine_of(arm.typed).args(arm.typed, 0, "127.0.0.1")
    model = SimModel.from_args(sim_parse_args(flags))
    assert not model.speculative or all(p == 1.0 for p in model.accept_probs)  # else the truth is not exact
    decoded = arm.cfg.workload.max_tokens - 1
    assert decoded % model.expected_accept_length() == 0  # whole cycles: no shorter last one
    tpot = {c: model.step_ms(c) / model.expected_accept_length() for c in range(1, maximum + 1)}
    return max(c for c, ms in tpot.items() if ms <= limit_ms)


@pytest.mark.slow
def test_capacity_finds_the_simulators_known_capacity_per_arm_within_10_percent(tmp_path):
    runs = tmp_path / "runs"
    done = specgate("capacity", EXP, f"record.root={runs}")
    (folder,) = runs.iterdir()
    data = json.loads((folder / "capacity.json").read_text())
    experiment = compose([EXP])
    (slo,) = slos_of(experiment.base)
    truth = {arm.name: true_capacity(arm, slo.limit_ms, int(experiment.base.capacity.max)) for arm in experiment.arms}
    found = {name: block["capacity"] for name, block in data["arms"].items()}
    print(f"truth {truth}, found {found}")
    assert truth == {"baseline": 12, "eagle3": 17}  # what conf/exp/sim_capacity.yaml's comment says
    for name, capacity in found.items():
        assert abs(capacity - truth[name]) <= 0.1 * truth[name], (name, capacity, truth[name], done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert folder.name.endswith("_sim_capacity_capacity")
    assert (data["status"], data["exit_status"], data["dimension"]) == ("finished", 0, "concurrency")
    for name, block in data["arms"].items():
        probes = block["probes"]
        assert block["status"] == "finished" and block["first_miss"] == block["capacity"] + 1
        assert block["goodput_rps"] > 0 and block["at_capacity"]["load"] == block["capacity"]
        assert [p["probe"] for p in probes] == list(range(len(probes)))
        assert all(p["met"] == (p["tpot_ms"]["p99"] <= slo.limit_ms) for p in probes)
        assert len({json.dumps(p["load"]) for p in probes}) == len(probes)  # no load probed twice
    (verdict,) = data["gates"]
    assert (verdict["name"], verdict["arm"], verdict["status"]) == ("min_capacity", "eagle3", "passed")
    assert verdict["scope"] == "capacity"  # one verdict type, written as run and sweep records write theirs
    assert f"specgate capacity gate: PASSED min_capacity eagle3: {verdict['detail']}" in done.stdout
    assert f"- PASSED min_capacity eagle3: {verdict['detail']}" in (folder / "summary.md").read_text()
    server_logs = [(folder / "arms" / arm / "server.log").read_text() for arm in ("baseline", "eagle3")]
    assert all(log.count("server_args:") == 1 for log in server_logs)  # one server start per arm, every probe on it
    lines = read_lines(folder)
    assert {line["probe"] for line in lines if line["arm"] == "eagle3"} == set(range(len(data["arms"]["eagle3"]["probes"])))
    assert "## Probes" in (folder / "summary.md").read_text() and (folder / "config.yaml").is_file()
    assert not containers_of(folder)
    assert cli.main(["report", str(folder)]) == 0  # the capacity record's own page
    page = (folder / "report.html").read_text()
    assert "Capacity: sim_capacity" in page and page.count('src="data:image/png;base64,') == 2  # TPOT p99, goodput
    assert "http://" not in page and "https://" not in page  # self-contained


def containers_of(record: Path) -> list:
    """The containers labelled with this record (its path: another test's run may share its name)."""
    return labelled_containers(docker.from_env(), f"{RECORD}={record.resolve()}")


@pytest.mark.slow
def test_ctrl_c_stops_the_probe_and_the_server_and_closes_the_record(tmp_path):
    runs = tmp_path / "runs"
    child = start_specgate("capacity", EXP, f"record.root={runs}", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True, preexec_fn=as_a_background_job)  # Ctrl-C inherited ignored
    try:
        for line in child.stdout:  # the first probe has met the SLOs: the second is under way
            if "concurrency 1: met" in line:
                break
        child.send_signal(signal.SIGINT)
        output = child.communicate(timeout=60)[0]
    finally:
        if child.poll() is None:
            child.kill()
    (folder,) = runs.iterdir()
    data = json.loads((folder / "capacity.json").read_text())
    assert child.returncode == 2, output
    assert (data["status"], data["exit_status"]) == ("interrupted", 2)
    assert (data["arms"]["baseline"]["status"], data["arms"]["eagle3"]["status"]) == ("interrupted", "not_run")
    assert "status **interrupted**" in (folder / "summary.md").read_text()
    assert not containers_of(folder)
    assert not list(folder.rglob(".*.tmp"))  # no half-written file


def run_capacity_cli(tmp_path, *overrides: str) -> tuple[int, dict, Path]:
    """`specgate capacity` in this process: a whole run, servers and all."""
    require_whole_run_marker()
    runs = tmp_path / "runs"
    status = cli.main(["capacity", EXP, *overrides, f"record.root={runs}"])
    (folder,) = runs.iterdir()
    return status, json.loads((folder / "capacity.json").read_text()), folder


@pytest.mark.slow
def test_a_capacity_that_reaches_max_is_a_bound_the_gate_cannot_pass_on(tmp_path):
    status, data, folder = run_capacity_cli(tmp_path, "capacity.max=2")
    assert (status, data["exit_status"]) == (1, 1)
    for block in data["arms"].values():
        assert (block["capacity"], block["reached_max"], block["first_miss"]) == (2, True, None)
        assert [p["load"] for p in block["probes"]] == [1, 2]
    (verdict,) = data["gates"]
    assert verdict["status"] == "failed" and "cannot tell: eagle3 reached capacity.max" in verdict["detail"]  # 2 < 1.2 x 2, but only a bound
    assert "**2** (capacity.max reached: a lower bound)" in (folder / "summary.md").read_text()
    assert not containers_of(folder)


@pytest.mark.slow
def test_a_probe_whose_requests_fail_misses_and_the_search_exits_1(tmp_path):
    status, data, folder = run_capacity_cli(tmp_path, "workload.timeout_s=0.1", "gate.min_capacity.eagle3.over=null",
                                            "+gate.min_capacity.eagle3.at_least=1")
    assert status == 1
    for block in data["arms"].values():  # every request outlives 0.1 s: even the first load is not served
        (probe,) = block["probes"]
        assert (block["status"], block["capacity"], probe["met"], probe["good_requests"]) == ("finished", None, False, 0)
        assert probe["failed_requests"] == 4 and "4 of 4 requests failed" in probe["misses"][-1]
    (verdict,) = data["gates"]
    assert verdict["status"] == "failed" and "below 1 (even the first load missed)" in verdict["detail"]
    assert not containers_of(folder)
