"""Every gate's value lies inside its interval (issue 32): the figure a verdict shows and the
interval it states come from one estimator, whatever the samples. Random loads of two runs
(this one of two repeats, so results.json's figure, their median, is not the pooled samples')
through every arm gate that states an interval, for every registry metric a reference run or
an A/B can judge, and through the speedup."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.ab.driver import RoundPair
from harness.config.schema import GateConfig
from harness.gates import registry
from harness.gates.ab import no_regression_between_sides
from harness.gates.registry import ABContext, GateContext, gates_in
from harness.gates.reproduce import recomputed
from harness.gates.verdict import interval_point
from harness.measure.metrics import Stat
from harness.measure.registry import all_metrics, put, resolve
from tests.gates.test_change import lines
from tests.support.arm_results import result

COMPARABLE = [m.path for m in all_metrics() if m.samples is not None and not m.between_arms and not m.count]
SEEDS = (3, 17)


def load(seed: int, n: int, step_ms: float, repeats: int = 1) -> list[dict]:
    """A closed loop's measured requests with drafts (accept length ~2), over `repeats` repeats."""
    rng = np.random.default_rng(seed)
    out = []
    for repeat in range(repeats):
        for line in lines(n, int(rng.integers(1 << 30)), step_ms=step_ms * rng.uniform(0.9, 1.1), concurrency=8,
                          repeat=repeat):
            out.append({**line, "index": len(out), "spec_verify_ct": int(rng.integers(28, 36))})
    return out


def block(requests: list[dict]) -> dict:
    """The reference arm's results.json block: its figures as the record computes them from its rows."""
    arm = dict(requests={"ok": len(requests), "failed": 0}, duration_s=60.0)
    for path in COMPARABLE:
        value = recomputed(resolve(path), requests)
        if value is not None:
            put(arm, path, value)
    return arm


def arm_result(requests: list[dict]):
    """The same figures as an ArmResult, the shape every arm gate reads."""
    figures, stats = {}, {}
    for path in COMPARABLE:
        value = recomputed(resolve(path), requests)
        family, _, stat = path.partition(".")
        if stat:
            stats.setdefault(family, {})[stat] = value
        else:
            figures[path] = value
    return result(**figures, **{family: Stat(**values) for family, values in stats.items()},
                  requests_ok=len(requests), duration_s=60.0, completion_tokens=sum(r["completion_tokens"] for r in requests))


def reference_ctx(metric: str, seed: int) -> GateContext:
    rng = np.random.default_rng(seed)
    old, new = load(seed, 260, 4.0), load(seed + 1, 130, 4.0 * rng.uniform(0.9, 1.15), repeats=2)
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), {"baseline": "runs/old", "compare": {metric: "3%"}})
    return GateContext(arm="eagle3", gate=cfg, result=arm_result(new), gpu=None, plain_arm=None, results={},
                       reference=block(old), reference_label="runs/old", telemetry_source="off", requests=new,
                       reference_requests=old)


def assert_inside(verdicts) -> int:
    """Every verdict stating an interval shows a point inside it; how many stated one."""
    stated = [v for v in verdicts if v.interval is not None]
    for v in stated:
        point = interval_point(v)
        assert point is not None and v.interval[0] <= point <= v.interval[1], (v.name, point, v.interval, v.detail)
    return len(stated)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("metric", COMPARABLE)
def test_every_arm_gates_value_lies_inside_its_interval_against_a_reference_run(metric, seed):
    ctx = reference_ctx(metric, seed)
    verdicts = [v for gate in gates_in("arm") for v in gate.check(ctx)]  # every registered arm gate, guarded
    assert_inside(verdicts)
    [compared] = [v for v in verdicts if v.name == f"baseline.{metric}"]
    assert compared.interval is not None or compared.status in ("inconclusive", "skipped"), compared.detail


@pytest.mark.parametrize("seed", SEEDS)
def test_a_speedups_value_lies_inside_its_interval(seed):
    rng = np.random.default_rng(seed)
    mine, plain = load(seed, 120, 2.5, repeats=2), load(seed + 7, 120, 4.0 * rng.uniform(0.8, 1.2), repeats=2)
    # results.json's rates: the median of the repeats', not the pooled samples' the interval is drawn from
    results = {"eagle3": result(output_tok_s=recomputed(resolve("output_tok_s"), mine)),
               "baseline": result("baseline", output_tok_s=recomputed(resolve("output_tok_s"), plain))}
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), {"min_speedup": {"eagle3": {"over": "baseline", "ratio": 1.4}}})
    ctx = GateContext(arm="eagle3", gate=cfg, result=results["eagle3"], gpu=None, plain_arm="baseline", results=results,
                      reference=None, reference_label="", telemetry_source="off", requests=mine,
                      arm_requests={"eagle3": mine, "baseline": plain})
    assert assert_inside(registry.GATES["min_speedup"].check(ctx)) == 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("metric", COMPARABLE)
def test_an_ab_verdicts_value_lies_inside_its_interval(metric, seed):
    rng = np.random.default_rng(seed)
    rounds = [RoundPair(r + 1, {"A": load(seed + 10 * r, 40, 4.0), "B": load(seed + 10 * r + 5, 40, 4.0 * rng.uniform(0.95, 1.1))},
                        {"A": result(), "B": result()}) for r in range(3)]
    gate = OmegaConf.structured(GateConfig(compare={metric: "2%"}))
    assert_inside(no_regression_between_sides(ABContext(gate, {"eagle3": rounds}, {"A": "a", "B": "b"})))
