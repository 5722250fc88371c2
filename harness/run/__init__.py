"""One run of an experiment: its arms one at a time (runner.py), one arm on its server (arm.py) into an `ArmOutcome` (outcome.py), the composition every caller uses, each name checked against the registry that owns it (compose.py), the checks before any server starts (drafter_fit.py), and replay of a recorded run (replay.py).

The measurement every driver (run, sweep, capacity) shares. Never pytest: the pytest plugin drives it.
"""
