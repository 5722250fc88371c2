"""vLLM's per-request speculative stats (vLLM 0.32, `--per-request-spec-decode-metrics
summary`): the final usage chunk's `metrics.speculative_decoding` read into the request's
line, the arm's accept length by vLLM's own definition (1 + Σ accepted ÷ Σ steps, no
prefill token, as its /metrics counters), and the sources gate comparing the requests, the
counters and the stream: three sources, failing when any one disagrees."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.config.schema import GateConfig
from harness.engines.sglang import SGLang
from harness.engines.vllm import ONE_PLUS_ACCEPTED, VLLM
from harness.gates import registry, speculative
from harness.load import RequestRecord
from harness.load.requests import _read_openai
from harness.measure.metrics import category_figures
from harness.measure.registry import resolve
from harness.measure.samples import ACCEPTED_DEFINITION, AcceptLengthRow, TOKENS_DEFINITION
from tests.support.arm_results import result

# what vLLM 0.32 sends last (entrypoints/openai/chat_completion/serving.py, RequestSpecDecodeMetrics.to_dict)
SPEC = {"mean_acceptance_length": 2.25, "draft_acceptance_rate": 5 / 12, "acceptance_histogram": [1, 2, 1, 0],
        "num_spec_steps": 4, "num_accepted_draft_tokens": 5, "num_draft_tokens": 12, "num_spec_tokens": 3}
FINAL = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 7, "completion_tokens": 10, "total_tokens": 17},
         "metrics": {"speculative_decoding": SPEC}}


class Stream:
    """aiohttp's StreamReader as _read_openai reads it: readany() until b""."""

    def __init__(self, events: list[dict | str]):
        text = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
        self.parts = [text.encode()]

    async def readany(self) -> bytes:
        return self.parts.pop(0) if self.parts else b""


def chunk(text: str, total: int) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            "usage": {"prompt_tokens": 7, "completion_tokens": total, "total_tokens": 7 + total}}


def test_vllms_final_usage_chunk_becomes_the_lines_spec_fields():
    assert VLLM().spec_details(FINAL) == {"spec_verify_ct": 4, "spec_accepted_drafts": 5, "spec_accept_length": 2.25,
                                          "spec_correct_drafts_histogram": [1, 2, 1, 0]}
    assert VLLM().spec_details(chunk("a", 1)) is None  # a content chunk carries none
    assert VLLM().spec_details({**FINAL, "metrics": {"ttft_ms": 3.0}}) is None  # timing metrics only
    assert SGLang().spec_details(FINAL) is None  # SGLang's reader takes nothing of vLLM's

    rec = RequestRecord(index=0, warmup=False)
    stream = Stream([chunk("a", 1), chunk("b c", 3), chunk("d e f", 6), chunk("g h", 8), chunk("i j", 10),
                     FINAL, "[DONE]"])
    asyncio.run(_read_openai(stream, rec, True, VLLM().spec_details, None))
    line = rec.to_json(0.0)
    assert (line["completion_tokens"], line["chunk_tokens"]) == (10, [1, 2, 3, 2, 2])
    assert (line["spec_verify_ct"], line["spec_accepted_drafts"], line["spec_accept_length"]) == (4, 5, 2.25)
    assert line["spec_correct_drafts_histogram"] == [1, 2, 1, 0]


# vLLM: 10 steps accepting 15 drafts (26 tokens, the prefill's first among them) and 5 accepting
# none (6 tokens): 1 + 15 ÷ 15 = 2.0 exactly; Σ tokens ÷ Σ steps would be 32 ÷ 15 = 2.1333
VLLM_LINES = [{"ok": True, "warmup": False, "repeat": 0, "completion_tokens": 26, "spec_verify_ct": 10,
               "spec_accepted_drafts": 15},
              {"ok": True, "warmup": False, "repeat": 0, "completion_tokens": 6, "spec_verify_ct": 5,
               "spec_accepted_drafts": 0}]
SGLANG_LINES = [{k: v for k, v in line.items() if k != "spec_accepted_drafts"} for line in VLLM_LINES]


class Columns:
    def __init__(self, lines: list[dict]):
        self.lines = lines

    def get(self, name: str) -> np.ndarray:
        return np.array([np.nan if line.get(name) is None else line[name] for line in self.lines], dtype=float)


def test_the_per_request_accept_length_is_the_engines_own_definition():
    accept = resolve("accept_length")
    assert accept.value_from(VLLM_LINES) == 2.0  # the arm's figure: 1 + Σ accepted ÷ Σ steps
    assert accept.value_from(SGLANG_LINES) == pytest.approx(32 / 15)  # SGLang's: Σ tokens ÷ Σ cycles, as before
    assert speculative.per_request_accept_length(VLLM_LINES) == 2.0
    assert speculative.per_request_accept_length(SGLANG_LINES) == pytest.approx(32 / 15)
    rows = AcceptLengthRow().from_columns(Columns(VLLM_LINES))  # a record's columns read back
    assert rows[:, 0].sum() / rows[:, 1].sum() == 2.0
    rows = AcceptLengthRow().from_columns(Columns(SGLANG_LINES))
    assert rows[:, 0].sum() / rows[:, 1].sum() == pytest.approx(32 / 15)
    records = [RequestRecord(index=i, warmup=False, completion_tokens=line["completion_tokens"],
                             spec_verify_ct=line["spec_verify_ct"], spec_accepted_drafts=line["spec_accepted_drafts"])
               for i, line in enumerate(VLLM_LINES)]
    assert category_figures(records)["accept_length"] == 2.0


def gate_cfg(**values):
    return OmegaConf.merge(OmegaConf.structured(GateConfig), values)


def context(lines: list[dict], windows: list[dict]) -> registry.GateContext:
    return registry.GateContext(arm="draft", gate=gate_cfg(), result=result(), gpu=None, plain_arm="plain",
                                results={}, reference=None, reference_label="", telemetry_source="off",
                                requests=lines, server_windows=windows)


def vllm_window(accepted: float, drafts: float) -> dict:
    return {"spec_drafts": drafts, "spec_accepted_tokens": accepted, "accept_length": 1 + accepted / drafts,
            "accept_length_definition": ONE_PLUS_ACCEPTED}


def streamed(chunks: list[int], accepted: int) -> dict:
    """A vLLM line with per-request stats: the prefill's token, then one chunk per step."""
    return {"ok": True, "warmup": False, "repeat": 0, "completion_tokens": sum(chunks), "chunk_tokens": chunks,
            "spec_verify_ct": len(chunks) - 1, "spec_accepted_drafts": accepted}


# 4 steps accepting 4 drafts and 3 accepting 3: 1 + 7 ÷ 7 = 2.0; the stream over every step
# holds 14 tokens in 7 chunks, 2.0, up to 16 ÷ 7 were both last steps whole (3 tokens)
THREE = [streamed([1, 2, 2, 2, 2], 4), streamed([1, 3, 1, 2], 3)]


def test_three_sources_that_count_the_same_steps_agree_and_the_verdict_names_them():
    [v] = speculative.accept_length_sources_agree(context(THREE, [vllm_window(7, 7)]))
    assert v.status == "passed" and v.value == 0.0, v.detail
    assert "3 sources (requests, server, stream) agree" in v.detail
    assert f"requests: {ACCEPTED_DEFINITION} = 2.0000" in v.detail
    assert f"server: {ONE_PLUS_ACCEPTED} = 2.0000" in v.detail and "stream: the stream over every decode step" in v.detail


def test_one_source_off_fails_the_three():
    # the server claims 1 + 9/7 = 2.2857 where the requests and the stream say 2.0
    [server] = speculative.accept_length_sources_agree(context(THREE, [vllm_window(9, 7)]))
    assert server.status == "failed" and "3 sources (requests, server, stream) disagree by 12.50% of the largest" \
        in server.detail, server.detail
    # the requests claim 9 accepted where the server's counters and the stream say 7
    lying = [streamed([1, 2, 2, 2, 2], 6), streamed([1, 3, 1, 2], 3)]
    [requests] = speculative.accept_length_sources_agree(context(lying, [vllm_window(7, 7)]))
    assert requests.status == "failed" and "requests: " + ACCEPTED_DEFINITION + " = 2.2857" in requests.detail
    # the stream's steps hold more tokens than the counts say were accepted
    fat = [{**THREE[0], "chunk_tokens": [1, 3, 3, 3, 0]}, THREE[1]]
    [stream] = speculative.accept_length_sources_agree(context(fat, [vllm_window(7, 7)]))
    assert stream.status == "failed" and "stream: the stream over every decode step" in stream.detail, stream.detail


def test_sglangs_counts_are_not_compared_with_the_stream():
    # Σ tokens ÷ Σ cycles counts the prefill's token, the stream does not: two sources, as before
    lines = [{k: v for k, v in line.items() if k != "spec_accepted_drafts"} for line in THREE]
    [v] = speculative.accept_length_sources_agree(context(lines, [{"accept_length": 16 / 7,
                                                                   "accept_length_definition": "tokens ÷ calls"}]))
    assert "2 sources (requests, server) agree" in v.detail and TOKENS_DEFINITION in v.detail, v.detail


def test_the_option_reaches_speculative_arms_only_and_the_flag_by_hand_on_a_plain_arm_is_refused():
    from harness.config.compose import ConfigError
    from harness.engines import engine_of
    from harness.run.compose import compose

    exp = compose(["+exp=vllm_cpu_smoke", "server.vllm.per_request_spec_metrics=summary"])
    args = {arm: engine_of(exp.arm(arm).typed).launch(exp.arm(arm).typed, 31000, "127.0.0.1", False).args
            for arm in ("plain", "draft_self")}
    assert "--per-request-spec-decode-metrics" not in args["plain"]  # vLLM refuses it without --speculative-config
    at = args["draft_self"].index("--per-request-spec-decode-metrics")
    assert args["draft_self"][at + 1] == "summary"
    default = compose(["+exp=vllm_cpu_smoke"]).arm("draft_self").typed  # off unless asked: as before
    assert "--per-request-spec-decode-metrics" not in engine_of(default).launch(default, 31000, "127.0.0.1", False).args
    with pytest.raises(ConfigError, match="arm 'plain': --per-request-spec-decode-metrics in server.extra_args reaches "
                                          "a plain arm"):  # refused before any server starts
        compose(["+exp=vllm_cpu_smoke", "server.extra_args=[--per-request-spec-decode-metrics,summary]"])
    hand = compose(["+exp=vllm_cpu_smoke", "server.vllm.per_request_spec_metrics=summary"]).arm("draft_self").typed
    hand.server.extra_args = ["--per-request-spec-decode-metrics", "summary"]
    engine_of(hand).check(hand)  # a speculative arm may take it by hand
    with pytest.raises(ConfigError, match="not one of vLLM's levels: summary, detailed, none"):
        compose(["+exp=vllm_cpu_smoke", "server.vllm.per_request_spec_metrics=full"])
