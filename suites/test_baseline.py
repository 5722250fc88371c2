"""Did this run regress against a reference run (gate.baseline=<run dir | results.json>)?
Each compared metric may move by its allowed change (gate.compare, e.g. output_tok_s:
"-3%"; by default the metric registry's compared metrics — tok/s and TTFT/ITL p50/p99 —
at gate.tolerance) or by the noise band measured over the repeats, whichever is larger.
Improvements beyond the band are reported.
The tests are the reference-run gates of harness/gates/registry.py's registry, one test per gate."""

from harness.plugin import gate_tests

globals().update(gate_tests("baseline"))
