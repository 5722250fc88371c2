"""The run empties the prefix cache before a load's /metrics baseline, never inside the
window, records whether it did, and says so when counters went backwards inside it."""

from __future__ import annotations

from types import SimpleNamespace

from omegaconf import OmegaConf

from harness.config.schema import SpecgateConfig, WorkloadConfig
from harness.engines.base import CacheReset
from harness.engines.sglang import SGLang
from harness.measure.server_metrics import parse
from harness.run.arm import ArmSession, Readings
from harness.run.outcome import ArmOutcome

TEXT = '# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total{{model_name="m"}} {n}\n'


def session(reset: bool, calls: list[str]) -> ArmSession:
    s = ArmSession.__new__(ArmSession)  # no server: only the window's order is under test
    workload = {"reset_prefix_cache": reset}
    s.arm = SimpleNamespace(name="a", cfg=OmegaConf.create({"workload": workload}),
                            typed=SpecgateConfig(workload=WorkloadConfig(**workload)))
    s.outcome = ArmOutcome("a")
    s.client = object()
    s.member_clients = [s.client]
    s.engine = SimpleNamespace(reset_prefix_cache=lambda client, cfg: calls.append("reset")
                               or CacheReset(True, "POST /flush_cache"))
    s.metrics_snapshot = lambda: calls.append("snapshot")
    return s


def test_the_reset_comes_before_the_baseline_and_is_recorded_per_load():
    calls: list[str] = []
    s = session(True, calls)
    s.start_window(0)
    s.start_window(1, probe=3)
    assert calls == ["reset", "snapshot", "reset", "snapshot"]
    assert s.outcome.prefix_cache_resets == [{"repeat": 0, "reset": True, "route": "POST /flush_cache"},
                                             {"repeat": 1, "probe": 3, "reset": True, "route": "POST /flush_cache"}]
    assert s.outcome.to_json()["prefix_cache_resets"] == s.outcome.prefix_cache_resets


def test_no_reset_when_the_workload_says_so_and_the_record_says_why():
    calls: list[str] = []
    s = session(False, calls)
    s.start_window(0)
    assert calls == ["snapshot"]
    (entry,) = s.outcome.prefix_cache_resets
    assert entry["reset"] is False and "workload.reset_prefix_cache=false" in entry["reason"]


def test_a_counter_that_went_backwards_inside_the_window_leaves_its_figures_missing_not_the_arm_failed():
    s = session(True, [])
    s.engine = SGLang()
    s.metrics_snapshot = lambda: Readings([parse(TEXT.format(n=10), SGLang.prometheus)])
    window = s.server_window([Readings([parse(TEXT.format(n=5000), SGLang.prometheus)])])
    assert "went backwards inside the measured window" in window["counter_reset_note"]
    assert s.outcome.status == "not_run"  # untouched: the arm's own measurement decides it


def test_the_summary_says_when_a_load_did_not_start_from_an_emptied_cache():
    from harness.report.summary import cache_not_reset

    assert cache_not_reset("a", [{"repeat": 0, "reset": True}]) is None
    sentence = cache_not_reset("a", [{"repeat": 0, "reset": True},
                                     {"repeat": 1, "reset": False, "reason": "HTTP 400: Flush cache failed."}])
    assert sentence == "a: the prefix cache was not reset before 1 of 2 load(s): HTTP 400: Flush cache failed."


class Stop(Exception):
    """Ends run_workload once the load's GPU window is closed: only the window is under test."""


def test_the_gpu_window_closes_when_the_last_measured_request_ended_not_when_the_clients_wound_down(monkeypatch):
    """run_load returns after its clients wind down (Ray actors report back, processes join):
    samples of the idle GPU in between were taken "under load" and failed a short load's
    utilization floor. The window now ends at the last measured request's end."""
    import time

    from harness.load.records import LoadResult, RequestRecord
    from harness.telemetry.sampler import Sampler

    marks: list[tuple[str, float | None]] = []
    sampler = Sampler.__new__(Sampler)
    sampler.mark_load_start = lambda t=None: marks.append(("start", t))
    sampler.mark_load_end = lambda t=None: marks.append(("end", t))
    t0 = time.perf_counter()
    done = LoadResult([RequestRecord(0, warmup=False, send_time=t0, chunk_times=[t0 + 0.1])], t0, t0 + 0.2, "chat", "m")

    def run_load(plan, progress, on_tokens_flowing, on_measured_start):
        on_tokens_flowing(t0 + 0.1)
        time.sleep(0.3)  # the clients wind down after the last request ended
        return done

    monkeypatch.setattr("harness.run.arm.run_load", run_load)
    s = ArmSession.__new__(ArmSession)
    s.load_plan = lambda workload: None
    s.keep_requests = lambda *args, **kwargs: (_ for _ in ()).throw(Stop())
    try:
        s.run_workload(None, 0, sampler, progress=None)
    except Stop:
        pass
    assert marks == [("start", t0 + 0.1), ("end", t0 + 0.2)]
