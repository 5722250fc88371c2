"""The acceptance axis on vLLM's CPU build, which has no forced acceptance: the graded draft
models (scripts/make_tiny_models.py: the target's weights plus seeded noise, each scale chosen
for an offline accept length) served as drafters by `+exp=vllm_cpu_break_even`, reduced for
`make test`: one sweep point (concurrency 2), plain, draft_self and two of the five graded
drafts, whose record every test reads, and the sweep's measured break-even over them. Each arm's measured accept length is where it lands on the axis; here
they must be ordered as the noise is, span the axis, agree with the offline figures, and
never change a token.

The load is a count here, not the experiment's 4 s: the first 8 specmix rows in the order a
load sends them (9 requests: one row has two turns), which are the first 8 of the 16 prompts
the offline figures were computed over (their offline accept lengths differ from the 16's by
at most 0.13), so the measured figures are about the engine, not about how many prompts a
busy box got through in 4 s (seen: 2, with first-2 accept lengths up to 0.55 off the 16's).
Takes minutes; `make test` runs it alone (`real_engine`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.runs import specgate

pytestmark = pytest.mark.real_engine

MODELS = Path(os.environ.get("SPECGATE_TINY_MODELS") or ROOT / ".cache" / "tiny-models")
GRADED = ("draft_graded_15", "draft_graded_35")  # 1.5 and 3.5 offline: with draft_self's 4.0, the axis (a vLLM start each)
ARMS = ("plain", "draft_self", *GRADED)
CONCURRENCY = 2
OFFLINE_SLACK = 0.4  # measured: within 0.07 of the first-8 offline figures (docs/engines.md)


@pytest.fixture(scope="module")
def graded_sweep(tmp_path_factory):
    """One sweep point (the workload's concurrency, 2): its run record, and sweep.json's measured
    break-even over the curve's arms (break_even_arms: draft_self and the graded drafts)."""
    root = tmp_path_factory.mktemp("graded-runs")
    arms = [token for name in ARMS for token in ("--arm", name)]
    proc = specgate("sweep", "+exp=vllm_cpu_break_even", f"workload.concurrency={CONCURRENCY}", "workload.duration_s=null",
                    "workload.num_prompts=8", f"record.root={root}", *arms, "-p", "no:cacheprovider", "--no-progress",
                    "-q", timeout=900)
    sweeps = list(root.iterdir())
    data = json.loads((sweeps[0] / "sweep.json").read_text()) if len(sweeps) == 1 else {}
    points = data.get("points") or [{}]
    record = sweeps[0] / points[0]["record"] if points[0].get("record") else None
    results = json.loads((record / "results.json").read_text()) if record else {}
    return proc, results, data


@pytest.fixture(scope="module")
def graded_run(graded_sweep):
    proc, results, _ = graded_sweep
    return proc, results


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((MODELS / "MANIFEST.json").read_text())


def test_the_reduced_run_passes_its_gates(graded_run):
    proc, _ = graded_run
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_every_arm_is_measured_from_vllms_counters(graded_run):
    _, results = graded_run
    arms = results["arms"]
    for name in ARMS:
        assert arms[name]["status"] == "measured", (name, arms[name].get("status"))
        assert arms[name]["requests"]["failed"] == 0 and arms[name]["requests"]["ok"] == 9, (name, arms[name]["requests"])
    for name in ("draft_self", *GRADED):
        assert arms[name]["accept_length_source"] == "server_metrics_window", name
    assert arms["plain"]["accept_length"] is None


def test_the_graded_drafts_span_the_axis_in_the_order_of_their_noise(graded_run, manifest):
    _, results = graded_run
    arms = results["arms"]
    by_noise = sorted(GRADED, key=lambda name: manifest["models"][name]["noise_scale"], reverse=True)
    measured = [arms[name]["accept_length"] for name in by_noise]
    assert measured == sorted(measured) and len(set(measured)) == len(measured), dict(zip(by_noise, measured))
    # with draft_random's ~1.0 (vllm_cpu_smoke, vllm_cpu_eagle3) the family spans ~1 to ~4
    assert measured[0] <= 2.0 and measured[-1] >= 3.0, dict(zip(by_noise, measured))
    assert arms["draft_self"]["accept_length"] >= 3.6, arms["draft_self"]["accept_length"]


def test_each_measured_accept_length_is_near_its_offline_one(graded_run, manifest):
    _, results = graded_run
    for name in GRADED:
        offline = manifest["models"][name]["offline_accept_length"]
        measured = results["arms"][name]["accept_length"]
        assert abs(measured - offline) <= OFFLINE_SLACK, (name, measured, offline)


def test_no_draft_changes_a_token(graded_run):
    _, results = graded_run
    verdicts = {(g["name"], g["arm"]): g for g in results["gates"]}
    for name in ("draft_self", *GRADED):
        verdict = verdicts[("lossless", name)]
        assert verdict["status"] == "passed" and verdict["value"] == 1.0, verdict["detail"]
        assert "9 of 9 requests generated exactly what they did in plain" in verdict["detail"], verdict["detail"]


def test_the_sweep_reads_a_break_even_off_the_graded_curve(graded_sweep):
    """The measured break-even at this concurrency over draft_self and the graded drafts (one
    drafter shape, so one cost per cycle): where their speedups cross 1.0x, or, on this build
    (a target-sized draft costs a plain step per draft step: 0.44-0.95x seen at concurrency 2), that they never do
    inside the axis, with where the line they follow would (extrapolated, said so)."""
    proc, _, data = graded_sweep
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    (entry,) = data["break_even_accept_length"]
    print(entry["words"])
    assert (entry["concurrency"], entry["k"]) == (CONCURRENCY, 3)
    assert sorted(entry["arms"]) == sorted(["draft_self", *GRADED])
    lengths = [point[0] for point in entry["points"]]
    assert lengths == sorted(lengths) and lengths[0] <= 2.0 and lengths[-1] >= 3.6
    assert all(point[1] > 0 for point in entry["points"])
    if entry["measured"] is not None:
        assert lengths[0] <= entry["measured"] <= lengths[-1] and entry["interval"] is not None
    elif entry["extrapolated"] is not None:  # no crossing inside the axis: where the line would cross
        assert "extrapolated, not measured" in entry["words"]
    else:  # speeds not measured alike (a busy 2-core box): said, never read as a break-even
        assert entry["words"].startswith("no break-even: the speedup falls from"), entry["words"]
