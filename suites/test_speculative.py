"""Is speculative decoding worth it on this server? Accept length (run-scoped, token-
weighted), speedup over the plain-decoding arm, and accept length against break-even
(verify-cycle time ÷ plain decode step), all from the same run.
The tests are the speculative gates of harness/gates/registry.py's registry, one test per gate."""

from harness.plugin import gate_tests

globals().update(gate_tests("speculative"))
