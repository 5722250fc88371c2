"""Verdicts and the gates that make them.

verdict.py    a Verdict (data): how every record writes and reads it, how every summary prints it,
              and the builders every gate uses
registry.py   the gate registry (@register with a scope: arm | sweep | capacity | ab; the contexts
              GateContext, SweepContext, CapacityContext, ABContext; GATES, judge, check_gate_config)
throughput.py, speculative.py, reference.py, gpu.py   the arm gates, one module per suite
sweep.py      the sweep gates (sweep_gate.*), capacity.py the capacity gate (gate.min_capacity)
ab.py         the A/B gate: B against A over alternating rounds (specgate ab)
change.py     a metric's change between two runs with an interval (reference.py's evidence), and
              between two sides over rounds (judge_paired, ab.py's)
lossless.py, baseline_match.py, client_bound.py, trust.py   the comparisons gates lean on

Importing the package imports every gate module, so the registry is whole wherever it is read.
"""

from harness.gates import ab, capacity, fleet, gpu, reference, speculative, sweep, throughput  # noqa: F401  (they register their gates)
