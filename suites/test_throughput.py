"""Throughput and latency of each arm's workload, against the experiment's gates.
A gate without a threshold for an arm is skipped with that reason, never passed.
The tests are the throughput gates of harness/gates/registry.py's registry, one test per gate."""

from harness.plugin import gate_tests

globals().update(gate_tests("throughput"))
