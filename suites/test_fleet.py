"""Is the router doing its job? The prefix-cache hit rate of each arm (a floor, or a gain over
another arm: cache-aware routing against round robin on the same prompts), and how evenly a
fleet's workers shared the requests.
The tests are the fleet gates of harness/gates/registry.py's registry, one test per gate."""

from harness.plugin import gate_tests

globals().update(gate_tests("fleet"))
