"""Did this run regress against a baseline run (gate.baseline=<run dir | results.json>)?
Each compared metric may move by its allowed change (gate.compare, e.g. output_tok_s:
"-3%"; by default tok/s and TTFT/ITL p50/p99 at gate.tolerance) or by the noise band
measured over the repeats, whichever is larger. Improvements beyond the band are reported."""

from harness import gate


def test_no_regression_against_baseline(arm_run, gates):
    gates.check(gate.against_baseline(arm_run.name, arm_run.result, arm_run.reference,
                                      arm_run.cfg.gate, arm_run.reference_label))
