"""What real servers send must not crash a run, or fail it for nothing: one arm measured in
this process (backend=attach) against a fake OpenAI server (tests/support/fake_openai.py)
whose /metrics counters restart or lie, or whose answers name another model. The client's
figures stand; what the server's account cannot give is missing with its reason, and what
disagrees is said in the arm's record and the summary."""

from __future__ import annotations

import json

import pytest

from harness.run.compose import compose
from harness.run.runner import Runner
from tests.support.fake_openai import FakeOpenAI

PROMPTS = 4
MAX_TOKENS = 16


def counters(tokens: float) -> str:
    """The simulator engine's (SGLang's) generation-token counter, as /metrics says it."""
    return f'# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total{{model_name="m"}} {tokens}\n'


def measure(fake: FakeOpenAI, tmp_path, *overrides: str) -> tuple[Runner, dict, str]:
    """One arm against ``fake``: the runner, the arm's block of results.json and the summary."""
    runner = Runner(compose(["backend=attach", f"backend.url={fake.url}", "workload=count_to_100", "telemetry=off",
                             f"workload.num_prompts={PROMPTS}", "workload.warmup_requests=1",
                             f"workload.max_tokens={MAX_TOKENS}", "workload.concurrency=2",
                             f"record.root={tmp_path}", *overrides]))
    try:
        runner.open_arm("default")
    finally:
        record = runner.finish()
    data = json.loads((record / "results.json").read_text())
    assert data["status"] == "finished"
    return runner, data["arms"]["default"], (record / "summary.md").read_text()


@pytest.fixture
def fake():
    started: list[FakeOpenAI] = []

    def start(**options) -> FakeOpenAI:
        started.append(FakeOpenAI("ok", **options).start())
        return started[-1]

    yield start
    for server in started:
        server.close()


def test_counters_that_go_backwards_leave_the_server_figures_missing_and_the_client_figures_standing(fake, tmp_path):
    """A server restarted behind the same address (or a worker replaced behind a router) between
    the two /metrics snapshots: its counters restart from zero. That used to make the arm
    server_failed and discard the client's good figures."""
    restarted = fake(metrics=lambda server, scrape: counters(5000 if scrape == 0 else server.streamed_tokens))
    runner, arm, summary = measure(restarted, tmp_path)
    assert arm["status"] == "measured" and "error" not in arm
    assert arm["requests"] == {"ok": PROMPTS, "failed": 0} and arm["output_tok_s"] > 0
    [window] = arm["server_metrics"]
    assert window["counters_went_backwards"] == [f"sglang:generation_tokens_total: 5000 -> {PROMPTS * MAX_TOKENS + MAX_TOKENS}"]
    assert window.get("generation_tokens") is None and window.get("ttft_mean_ms") is None
    note = window["counter_reset_note"]
    assert "went backwards inside the measured window" in note and "the server restarted, or a worker" in note
    assert f"default: {note}" in summary


@pytest.mark.parametrize("lie", [1, 10])
def test_a_generation_counter_that_disagrees_with_the_stream_is_said_and_an_honest_one_is_silent(fake, tmp_path, lie):
    """The counter grows by `lie` x the tokens the fake streamed; the warm-up's tokens, counted
    before the window opens, never make an honest counter disagree."""
    server = fake(metrics=lambda server, scrape: counters(lie * server.streamed_tokens))
    runner, arm, summary = measure(server, tmp_path)
    assert arm["status"] == "measured" and arm["requests"]["ok"] == PROMPTS
    assert arm["server_metrics"][0]["generation_tokens"] == lie * PROMPTS * MAX_TOKENS
    found = [d for d in arm["client_server_disagreement"] if d["metric"] == "generated_tokens"]
    if lie == 1:
        assert found == [] and "counter of generated tokens" not in summary
        return
    [entry] = found
    assert (entry["client"], entry["server"]) == (PROMPTS * MAX_TOKENS, 10 * PROMPTS * MAX_TOKENS)
    assert ("- default: the server's counter of generated tokens (640 tokens) and the tokens the client received "
            "(64 tokens) disagree by 90 % (> 10 %)") in summary


def test_answers_naming_another_model_are_counted_and_flagged_naming_both(fake, tmp_path):
    """A router that sends the requests to another model's worker: every chunk names that model.
    The run measures it, so the record counts such requests and the summary warns."""
    server = fake(model="fake-model", named_model="other-model")
    runner, arm, summary = measure(server, tmp_path)
    assert arm["status"] == "measured" and arm["model"] == "fake-model"
    assert arm["other_models"] == {"other-model": PROMPTS}
    assert ("default: WARNING: 4 measured request(s) were answered naming model 'other-model', not 'fake-model' "
            "that they asked for") in summary
    lines = runner.outcomes["default"].request_lines
    assert {line["model"] for line in lines} == {"other-model"}


def test_answers_naming_the_model_asked_raise_no_warning(fake, tmp_path):
    runner, arm, summary = measure(fake(), tmp_path)
    assert "other_models" not in arm and "WARNING" not in summary
    assert {line["model"] for line in runner.outcomes["default"].request_lines} == {"fake-model"}
