"""The run measured the workload configured: no request generated more than its max_tokens,
and one that asked to ignore EOS generated exactly that many (harness/measure/output_length.py,
the workload_as_configured gate)."""

from omegaconf import OmegaConf

from harness.config.schema import GateConfig
from harness.gates import registry, throughput
from harness.load import RequestRecord
from harness.run.compose import compose
from harness.measure import output_length
from tests.support.arm_results import result


def request(completion, asked, ignore_eos=False, ok=True, warmup=False):
    return RequestRecord(index=0, warmup=warmup, send_time=1.0, chunk_times=[1.1], chunk_tokens=[completion],
                         status=200 if ok else 500, error=None if ok else "boom", end_time=1.2,
                         completion_tokens=completion, max_tokens=asked, ignore_eos=ignore_eos)


def test_within_max_tokens_is_as_configured_and_over_it_is_not():
    assert output_length.problem("a", output_length.judge([request(10, 16), request(16, 16)])) is None
    block = output_length.judge([request(64, 16), request(40, 16), request(16, 16), request(99, 16, warmup=True)])
    assert block["checked"] == 3 and block["over"] == 2 and block["over_example"] == [64, 16]
    assert output_length.problem("eagle3", block) == ("eagle3: 2 of 3 requests generated more tokens than max_tokens "
                                                      "asked (up to 64 for 16): the server ignored max_tokens")


def test_ignore_eos_asks_for_exactly_max_tokens():
    block = output_length.judge([request(12, 16, ignore_eos=True), request(16, 16, ignore_eos=True)])
    assert "1 of 2 requests stopped short of max_tokens although they asked to ignore EOS (down to 12 of 16)" in \
        output_length.problem("a", block)
    assert output_length.problem("a", output_length.judge([request(12, 16)])) is None  # an EOS: as configured


def test_repeats_combine():
    blocks = [output_length.judge([request(64, 16)]), output_length.judge([request(16, 16)]), None]
    assert output_length.combine(blocks) == {"checked": 2, "over": 1, "over_example": [64, 16],
                                             "short_with_ignore_eos": 0, "short_example": None}


def gate_ctx(res, **gate):
    cfg = OmegaConf.merge(OmegaConf.structured(GateConfig), gate)
    return registry.GateContext(arm="a", gate=cfg, result=res, gpu=None, plain_arm=None, results={}, reference=None,
                                reference_label="", telemetry_source="off")


def test_the_gate_fails_a_run_that_measured_another_workload_and_can_be_turned_off():
    over = result("a", output_length={"checked": 4, "over": 4, "over_example": [64, 16],
                                      "short_with_ignore_eos": 0, "short_example": None})
    [v] = throughput.workload_as_configured(gate_ctx(over))
    assert v.status == "failed" and v.detail.startswith("this run measured another workload than configured: a: 4 of 4")
    [off] = throughput.workload_as_configured(gate_ctx(over, check_workload=False))
    assert off.status == "skipped" and "gate.check_workload=false" in off.detail
    fine = result("a", output_length={"checked": 4, "over": 0, "over_example": None,
                                      "short_with_ignore_eos": 0, "short_example": None})
    [ok] = throughput.workload_as_configured(gate_ctx(fine))
    assert ok.status == "passed" and "all 4 requests generated at most their max_tokens" in ok.detail
    assert compose(["+exp=sim_smoke"]).base.gate.check_workload is True  # on by default

