"""The server speaks the HTTP API specgate measures through: JSON only (the debugging session's curl
without Content-Type got a 400 and measured nothing, in the engine's own error shape),
OpenAI-shaped responses and stream chunks (checked with the `openai` package's own types),
the official client can stream, and a native /generate, where the engine has one, reports
meta_info."""

import pytest

from harness.engines import engine_of
from harness.http_client import ServerClient

# The `openai` package takes ~0.9 s to import (its types are pydantic models): each test below
# imports what it uses, so that collecting the suites (every run, `--collect-only`, `-k` for
# another suite) does not pay for it.

CONTENT_TYPE_MESSAGE = "Unsupported Media Type: Only 'application/json' is allowed"
PROMPT = "Count from 1 to 10"


def chat_body(arm_run, **extra) -> dict:
    return {"model": arm_run.model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 24, "temperature": 0, **extra}


def test_form_encoded_post_is_refused_with_400(arm_run):
    """The debugging session's curl without Content-Type: refused, in the engine's own 400 shape
    (behind a router: in the router's, and by every worker in the engine's)."""
    engine = engine_of(arm_run.arm.typed)
    response = arm_run.client.post_form("/v1/chat/completions", chat_body(arm_run))
    assert response.status_code == 400, f"a form-encoded POST got {response.status_code}, not 400"
    message = arm_run.server.bad_request_message(response.json(), engine)
    assert "application/json" in message, message
    for member in arm_run.server.members():
        with ServerClient(member.base_url) as client:
            response = client.post_form("/v1/chat/completions", chat_body(arm_run))
        assert response.status_code == 400, f"{member.name}: a form-encoded POST got {response.status_code}, not 400"
        assert CONTENT_TYPE_MESSAGE in engine.bad_request_message(response.json())


def test_json_chat_completion_is_an_openai_chat_completion(arm_run):
    from openai.types.chat import ChatCompletion

    response = arm_run.client.post_json("/v1/chat/completions", chat_body(arm_run))
    assert response.status_code == 200, response.text
    completion = ChatCompletion.model_validate(response.json())
    assert completion.choices[0].message.content
    assert completion.usage.completion_tokens > 0


def test_chat_stream_chunks_are_openai_chunks(arm_run):
    from openai.types.chat import ChatCompletionChunk

    body = chat_body(arm_run, stream=True, stream_options={"include_usage": True})
    events = arm_run.client.stream_events("/v1/chat/completions", body)
    chunks = [ChatCompletionChunk.model_validate(event) for event in events]
    assert any(c.choices and c.choices[0].delta.content for c in chunks), "no content streamed"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0, "include_usage gave no usage chunk"


def test_completion_is_an_openai_completion(arm_run):
    from openai.types import Completion

    body = {"model": arm_run.model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    response = arm_run.client.post_json("/v1/completions", body)
    assert response.status_code == 200, response.text
    assert Completion.model_validate(response.json()).choices[0].text


def test_official_openai_client_streams(arm_run):
    from openai import OpenAI

    client = OpenAI(base_url=f"{arm_run.server.base_url}/v1", api_key="specgate-not-a-key", max_retries=0, timeout=60)
    stream = client.chat.completions.create(**chat_body(arm_run), stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text.strip(), "the openai client streamed no text"


def test_native_generate_reports_meta_info(arm_run):
    engine = engine_of(arm_run.arm.typed)
    if "generate" not in engine.apis:
        pytest.skip(f"{engine.name} has no native /generate")
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
    response = arm_run.client.post_json("/generate", body)
    assert response.status_code == 200, response.text
    meta = response.json()["meta_info"]
    missing = {"prompt_tokens", "completion_tokens", "e2e_latency", "finish_reason"} - meta.keys()
    assert not missing, f"meta_info lacks {sorted(missing)}"
    if arm_run.cfg.drafter.algorithm:
        assert meta.get("spec_verify_ct", 0) > 0, "a speculative server reported no spec_verify_ct"
        assert meta.get("spec_accept_length", 0) >= 1.0
