"""Is speculative decoding worth it on this server? Accept length (run-scoped, token-
weighted), speedup over the plain-decoding arm, and accept length against break-even
(verify-cycle time ÷ plain decode step), all from the same run."""

from harness import gate


def test_min_accept_length(arm_run, gates):
    gates.check(gate.min_accept_length(arm_run.name, arm_run.result, arm_run.cfg.gate))


def test_max_accept_length(arm_run, gates):
    gates.check(gate.max_accept_length(arm_run.name, arm_run.result, arm_run.cfg.gate))


def test_min_speedup(arm_run, gates, runner):
    gates.check(gate.min_speedup(arm_run.name, arm_run.result, arm_run.cfg.gate, runner.results))


def test_accept_length_at_least_break_even(arm_run, gates, runner):
    gates.check(gate.accept_length_at_least_break_even(
        arm_run.name, arm_run.result, arm_run.cfg.gate, runner.experiment.plain_arm, runner.results))
