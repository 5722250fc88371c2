"""Verdicts and the gates that make them.

verdict.py    a Verdict (data) and the builders every gate uses
registry.py   the gate registry (@register, GateContext, GATES)
throughput.py, speculative.py, reference.py, gpu.py   the gates, one module per suite
change.py     a metric's change between two runs with an interval (reference.py's evidence)
lossless.py, baseline_match.py, client_bound.py      the comparisons gates lean on

Importing the package imports every gate module, so the registry is whole wherever it is read.
May import: config (schema types), measure, record (to read a reference run).
"""

from harness.gates import gpu, reference, speculative, throughput  # noqa: F401  (they register their gates)
