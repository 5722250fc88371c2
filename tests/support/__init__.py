"""What more than one test area shares: fakes of servers and GPUs, the simulator as a process,
hand-made results, and the one helper that starts whole runs (runs.py). A fixture that only one
area uses lives in that area's conftest.py instead."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: suites/, conf/ and harness/ are here
