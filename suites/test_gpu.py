"""Are the GPUs boosting under load, and nothing slowing them down? Sampled only in the
window where the client sees tokens stream, after a ramp-in — never from a sleep after a
request that may have failed (an HTTP 400 reads idle clocks and learns nothing).
Without an NVIDIA driver, nvml/smi telemetry is skipped ("no NVIDIA driver"), not passed;
with telemetry off, skipped too.
The tests are the GPU gates of harness/gates/registry.py's registry, one test per gate."""

from harness.plugin import gate_tests

globals().update(gate_tests("gpu"))
