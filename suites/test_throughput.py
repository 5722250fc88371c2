"""Throughput and latency of each arm's workload, against the experiment's gates.
A gate without a threshold for an arm is skipped with that reason, never passed."""

from harness import gate


def test_requests_succeed(arm_run, gates):
    gates.check(gate.max_failed_requests(arm_run.name, arm_run.result, arm_run.cfg.gate))


def test_min_output_tok_s(arm_run, gates):
    gates.check(gate.min_output_tok_s(arm_run.name, arm_run.result, arm_run.cfg.gate))


def test_max_ttft_ms(arm_run, gates):
    gates.check(gate.max_latency("ttft_ms", arm_run.name, arm_run.result, arm_run.cfg.gate))


def test_max_itl_ms(arm_run, gates):
    gates.check(gate.max_latency("itl_ms", arm_run.name, arm_run.result, arm_run.cfg.gate))
