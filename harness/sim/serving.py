"""Generation endpoints: ``/v1/chat/completions``, ``/v1/completions``, ``/generate``.

Response bodies follow SGLang 0.5.x byte for byte where it matters:
chat stream chunks are msgspec ``StreamChunk``s (``reasoning_content`` always
present in ``delta``, no ``usage`` key unless set), the role chunk comes first, the
``finish_reason`` comes in its own empty-delta chunk, then an ``sglext`` chunk (if
spec details were asked for), then the usage chunk (``choices: []``), then
``data: [DONE]``.  Completions stream chunks are pydantic dumps (``"usage":null``)
with ``finish_reason`` on the last text chunk; the final usage chunk drops nulls.
One SSE chunk is written per scheduler step (several tokens under speculation).

``stream_options.continuous_usage_stats`` (independent of ``include_usage``, as in
SGLang's ``should_include_usage``) adds the *cumulative* ``usage`` of the request to
every chat content chunk (not to the role chunk, the finish-reason chunk or the
sglext chunk) and to every completions text chunk (in place of ``"usage":null``).

Output details, on streams and ``/generate`` (what the lossless gate compares):
``return_token_ids`` adds each chunk's new ``token_ids`` to its choice; chat ``logprobs`` /
``top_logprobs`` and completions ``logprobs: N`` fill the choice's ``logprobs`` in OpenAI's
shapes; ``/generate``'s ``return_logprob`` / ``top_logprobs_num`` add the cumulative
``output_token_logprobs`` and ``output_top_logprobs`` to ``meta_info``. With any of them a
chat step whose only token has no text (an EOS) still gets its chunk, so its id and logprob
are not lost. The values are the simulated model's (harness/sim/tokens.py: ``ranked``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from harness.sim.disagg import KEY as DISAGG_KEY, finishing
from harness.sim.emissions import trace_of
from harness.sim.errors import bad_request, dumps, invalid_field, json_response, missing_field, validation_error
from harness.sim.manager import EngineClient, ReqState
from harness.sim.prefix_cache import chat_tokens, text_tokens
from harness.sim.tokens import OutputPlan, chat_prompt_tokens, count_tokens, logprob_entries, plan_output

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
WEIGHT_VERSION = "default"
GEN_KEY = "sim_generation"


@dataclass
class GenParams:
    """A request reduced to what the engine needs."""

    prompt_tokens: int
    plan: OutputPlan
    max_new_tokens: int
    stream: bool
    include_usage: bool
    spec_details: bool
    model: str
    continuous_usage: bool = False  # stream_options.continuous_usage_stats
    top_logprobs: int | None = None  # logprobs asked for, with this many alternatives; None: none
    token_ids: bool = False  # return_token_ids
    cache_tokens: tuple = ()  # the prompt as tokens, for the prefix cache (harness/sim/prefix_cache.py); () = not cached
    logprob_text: bool = False  # /generate's return_text_in_logprobs
    text: str = ""  # the prompt's text: its content sets how well drafts are accepted

    @property
    def details(self) -> bool:
        """Whether each token's id or logprobs go out with it."""
        return self.token_ids or self.top_logprobs is not None


# --------------------------------------------------------------------- parsing
def _int_field(body: dict, name: str, errors: list, positive: bool = False) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            errors.append(invalid_field((name,), "Input should be a valid integer", v, "int_type"))
            return None
    if positive and v <= 0:
        errors.append(invalid_field((name,), f"Value error, {name} must be positive", v, "value_error"))
        return None
    return v


def _bool_field(body: dict, name: str, errors: list) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        errors.append(invalid_field((name,), "Input should be a valid boolean", v, "bool_type"))
        return False
    return v


def _message_text(content: Any) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                continue  # images etc.: no tokens in this simulator
            else:
                return None
        return "".join(parts)
    return None


def _stream_usage(body: dict) -> bool:
    opts = body.get("stream_options")
    return bool(isinstance(opts, dict) and opts.get("include_usage"))


def _continuous_usage(body: dict) -> bool:
    """utils.should_include_usage: ``continuous_usage_stats`` counts even without ``include_usage``."""
    opts = body.get("stream_options")
    return bool(isinstance(opts, dict) and opts.get("continuous_usage_stats"))


def parse_chat(body: Any, context_len: int) -> GenParams | web.Response:
    if not isinstance(body, dict):
        return validation_error([invalid_field((), "Input should be a valid dictionary or object to extract fields from", body, "model_attributes_type")])
    errors: list[dict] = []
    messages = body.get("messages")
    contents: list[str] = []
    if messages is None:
        errors.append(missing_field("messages", body))
    elif not isinstance(messages, list):
        errors.append(invalid_field(("messages",), "Input should be a valid list", messages, "list_type"))
    else:
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or "role" not in msg:
                errors.append(invalid_field(("messages", i), "Input should be a valid dictionary with a role", msg, "model_attributes_type"))
                continue
            text = _message_text(msg.get("content"))
            if text is None:
                errors.append(invalid_field(("messages", i, "content"), "Input should be a valid string", msg.get("content"), "string_type"))
                continue
            contents.append(text)
    max_tokens = _int_field(body, "max_tokens", errors)
    max_completion = _int_field(body, "max_completion_tokens", errors)
    n = _int_field(body, "n", errors)
    stream = _bool_field(body, "stream", errors)
    ignore_eos = _bool_field(body, "ignore_eos", errors)
    spec = _bool_field(body, "return_spec_tokens_details", errors)
    logprobs = _bool_field(body, "logprobs", errors)
    top_logprobs = _int_field(body, "top_logprobs", errors)
    token_ids = _bool_field(body, "return_token_ids", errors)
    if errors:
        return validation_error(errors)
    if n not in (None, 1):
        return bad_request("The simulator supports n=1 only.")
    if top_logprobs is not None and not logprobs:
        return bad_request("top_logprobs is only allowed when logprobs is enabled.")
    if not contents:
        return bad_request("Messages must not be empty.")
    prompt_tokens = chat_prompt_tokens(contents)
    limit = max_completion if max_completion is not None else max_tokens
    if limit is not None and limit <= 0:
        return bad_request("max_tokens must be positive")
    if limit is None:
        # SGLang leaves max_new_tokens unset: generation may run to the context length.
        limit = max(1, context_len - prompt_tokens)
    if prompt_tokens + limit > context_len and max_completion is None and max_tokens is None:
        limit = max(1, context_len - prompt_tokens)
    return GenParams(
        prompt_tokens=prompt_tokens,
        plan=plan_output("\n".join(contents), ignore_eos),
        text="\n".join(contents),
        max_new_tokens=limit,
        stream=stream,
        include_usage=_stream_usage(body),
        spec_details=spec,
        model=str(body.get("model", "default")),
        continuous_usage=_continuous_usage(body),
        top_logprobs=(top_logprobs or 0) if logprobs else None,
        token_ids=token_ids,
        cache_tokens=chat_tokens(contents),
    )


def parse_completion(body: Any) -> GenParams | web.Response:
    if not isinstance(body, dict):
        return validation_error([invalid_field((), "Input should be a valid dictionary or object to extract fields from", body, "model_attributes_type")])
    errors: list[dict] = []
    prompt = body.get("prompt")
    text = ""
    n_prompt = 0
    cache: tuple = ()
    if prompt is None:
        errors.append(missing_field("prompt", body))
    elif isinstance(prompt, str):
        text, n_prompt, cache = prompt, count_tokens(prompt), text_tokens(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        n_prompt, cache = len(prompt), tuple(prompt)
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        text, n_prompt, cache = prompt[0], count_tokens(prompt[0]), text_tokens(prompt[0])
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        n_prompt, cache = len(prompt[0]), tuple(prompt[0])
    elif isinstance(prompt, list) and len(prompt) > 1:
        return bad_request("The simulator supports a single prompt per request.")
    else:
        errors.append(invalid_field(("prompt",), "Input should be a valid string", prompt, "string_type"))
    max_tokens = _int_field(body, "max_tokens", errors, positive=True)
    n = _int_field(body, "n", errors)
    stream = _bool_field(body, "stream", errors)
    ignore_eos = _bool_field(body, "ignore_eos", errors)
    spec = _bool_field(body, "return_spec_tokens_details", errors)
    logprobs = _int_field(body, "logprobs", errors)
    token_ids = _bool_field(body, "return_token_ids", errors)
    if errors:
        return validation_error(errors)
    if n not in (None, 1):
        return bad_request("The simulator supports n=1 only.")
    return GenParams(
        prompt_tokens=max(1, n_prompt),
        plan=plan_output(text, ignore_eos),
        text=text,
        max_new_tokens=16 if max_tokens is None else max_tokens,  # CompletionRequest.max_tokens = 16
        stream=stream,
        include_usage=_stream_usage(body),
        spec_details=spec,
        model=str(body.get("model", "default")),
        continuous_usage=_continuous_usage(body),
        top_logprobs=logprobs,
        token_ids=token_ids,
        cache_tokens=cache,
    )


# ------------------------------------------------------------------- helpers
def _usage(st: ReqState) -> dict:
    # Field order of protocol.UsageInfo.
    return {
        "prompt_tokens": st.prompt_tokens,
        "total_tokens": st.prompt_tokens + st.completion_tokens,
        "completion_tokens": st.completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def _spec_details(engine: EngineClient, st: ReqState) -> dict | None:
    """protocol.SpecTokensDetails built by utils.spec_tokens_details_from_meta_info."""
    meta = engine.spec_meta(st)
    if not meta:
        return None
    return {
        "spec_accept_rate": meta["spec_accept_rate"] or 0.0,
        "spec_accept_length": meta["spec_accept_length"] or 0.0,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": meta["spec_num_correct_drafts"],
        "spec_num_proposed_drafts": meta["spec_num_proposed_drafts"],
        "spec_verify_ct": meta["spec_verify_ct"],
        "spec_correct_drafts_histogram": meta["spec_correct_drafts_histogram"],
        "spec_cap_lens_histogram": [],
    }


def _token_json(text: str) -> dict:
    return {"token": text, "bytes": list(text.encode()), "logprob": 0.0}


def _chat_logprobs(p: GenParams, start: int, ids: list[int]) -> str:
    """A chunk's ``logprobs`` for the tokens from position ``start``: ChoiceLogprobs."""
    if p.top_logprobs is None:
        return "null"
    content = []
    for text, _, logprob, tops in logprob_entries(p.plan, start, ids, p.top_logprobs):
        alternatives = [{**_token_json(t), "logprob": lp} for t, _, lp in tops]
        content.append({**_token_json(text or ""), "logprob": logprob, "top_logprobs": alternatives})
    return dumps({"content": content})


def _completion_logprobs(p: GenParams, start: int, ids: list[int], offset: int) -> str:
    """A chunk's ``logprobs`` in the completions shape (LogProbs); ``offset``: the
    characters generated before it."""
    if p.top_logprobs is None:
        return "null"
    out: dict[str, list] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for text, _, logprob, tops in logprob_entries(p.plan, start, ids, p.top_logprobs):
        out["text_offset"].append(offset)
        out["token_logprobs"].append(logprob)
        out["tokens"].append(text or "")
        out["top_logprobs"].append({t: lp for t, _, lp in tops})
        offset += len(text or "")
    return dumps(out)


def _token_ids(p: GenParams, ids: list[int]) -> str:
    """The choice's ``token_ids`` member (with its comma), or nothing when not asked for."""
    return ',"token_ids":' + dumps(ids) if p.token_ids else ""


def _matched(finish: dict | None) -> Any:
    return finish.get("matched") if finish else None


def _open(request: web.Request, engine: EngineClient, p: GenParams, rid: str | None):
    """Submit the request; the app closes the generator when the handler ends, so a
    client that disconnects mid-stream aborts its request at once (SGLang's abort task)."""
    if engine.model.forced:  # the scheduler emits fillers (tokens.py); its logprobs are rendered from this plan
        p.plan = p.plan._replace(forced=True)
    split = request.get(DISAGG_KEY)  # a prefill or decode server's request (harness/sim/disagg.py)
    max_new = p.max_new_tokens
    if split is not None and split.max_new_tokens is not None:  # the prefill side makes the first token only
        max_new = min(max_new, split.max_new_tokens)
    gen = engine.generate(p.prompt_tokens, max_new, p.plan, p.stream, rid=rid,
                          accept_probs=engine.model.accept_probs_for(p.text), cache_tokens=p.cache_tokens,
                          arrived=split.arrived if split is not None else None,
                          prefilled=split.prefilled if split is not None else False)
    if split is not None and split.finish is not None:  # the prefill side sends the KV before it answers
        gen = finishing(gen, split)
    request[GEN_KEY] = gen
    return gen


async def _start_sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await resp.prepare(request)
    return resp


# ----------------------------------------------------------------------- chat
async def chat_completions(request: web.Request, engine: EngineClient, p: GenParams) -> web.StreamResponse:
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    gen = _open(request, engine, p, rid)
    if not p.stream:
        text_parts: list[str] = []
        st = None
        async for st, updates in gen:
            text_parts.extend(u.text for u in updates)
        assert st is not None
        resp: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": p.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(text_parts), "reasoning_content": None},
                    "logprobs": None,
                    "finish_reason": st.finish["type"] if st.finish else None,
                    "matched_stop": _matched(st.finish),
                }
            ],
            "usage": _usage(st),
            "metadata": {"weight_version": WEIGHT_VERSION},
        }
        if p.spec_details and (details := _spec_details(engine, st)) is not None:
            resp["sglext"] = {"spec_tokens_details": details}
        return json_response(resp)

    head = f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":{created},"model":{dumps(p.model)},"choices":[{{"index":0,"delta":'
    tail = ',"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
    resp = await _start_sse(request)
    trace = trace_of(request)
    emitted = 0  # output tokens in the chunks written so far
    first = True
    st = None
    position = 0  # of the next output token
    async for st, updates in gen:
        if first:
            first = False
            await resp.write((head + '{"reasoning_content":null,"role":"assistant","content":""}' + tail).encode())
        text = "".join(u.text for u in updates)
        ids = [i for u in updates for i in u.ids] if p.details else []
        if text or ids:
            content = (head + '{"reasoning_content":null,"content":' + dumps(text) + '},"logprobs":'
                       + _chat_logprobs(p, position, ids) + ',"finish_reason":null,"matched_stop":null'
                       + _token_ids(p, ids) + "}]")
            # StreamChunk(usage=UsageInfo.model_dump()) on content chunks only: its last field;
            # cumulative, as of the tokens in this chunk (meta_info.completion_tokens).
            content += (',"usage":' + dumps(_usage(st)) if p.continuous_usage else "") + "}\n\n"
            if trace is not None:
                trace.chunk(st.completion_tokens - emitted)
            emitted = st.completion_tokens
            await resp.write(content.encode())
        position += len(ids)
    assert st is not None
    out = []
    if st.finish is not None:
        out.append(
            head
            + '{"reasoning_content":null},"logprobs":null,"finish_reason":'
            + dumps(st.finish["type"])
            + ',"matched_stop":'
            + dumps(_matched(st.finish))
            + "}]}\n\n"
        )
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": p.model, "choices": []}
    if p.spec_details and (details := _spec_details(engine, st)) is not None:
        out.append(f"data: {dumps({**base, 'usage': None, 'sglext': {'spec_tokens_details': details}})}\n\n")
    if p.include_usage:
        out.append(f"data: {dumps({**base, 'usage': _usage(st)})}\n\n")
    await resp.write("".join(out).encode() + DONE)
    await resp.write_eof()
    return resp


# ----------------------------------------------------------------- completions
async def completions(request: web.Request, engine: EngineClient, p: GenParams) -> web.StreamResponse:
    rid = f"cmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    gen = _open(request, engine, p, rid)
    if not p.stream:
        text_parts: list[str] = []
        st = None
        async for st, updates in gen:
            text_parts.extend(u.text for u in updates)
        assert st is not None
        resp: dict[str, Any] = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": p.model,
            "choices": [
                {
                    "index": 0,
                    "text": "".join(text_parts),
                    "logprobs": None,
                    "finish_reason": st.finish["type"] if st.finish else None,
                    "matched_stop": _matched(st.finish),
                }
            ],
            "usage": _usage(st),
            "metadata": {"weight_version": WEIGHT_VERSION},
        }
        if p.spec_details and (details := _spec_details(engine, st)) is not None:
            resp["sglext"] = {"spec_tokens_details": details}
        return json_response(resp)

    head = f'data: {{"id":"{rid}","object":"text_completion","created":{created},"model":{dumps(p.model)},"choices":[{{"index":0,"text":'
    resp = await _start_sse(request)
    trace = trace_of(request)
    emitted = 0  # output tokens in the chunks written so far
    st = None
    position = offset = 0  # of the next output token, and of its first character
    async for st, updates in gen:
        text = "".join(u.text for u in updates)
        ids = [i for u in updates for i in u.ids] if p.details else []
        finish = updates[-1].finish if updates else None
        logprobs = _completion_logprobs(p, position, ids, offset)
        position, offset = position + len(ids), offset + len(text)
        if trace is not None:
            trace.chunk(st.completion_tokens - emitted)
        emitted = st.completion_tokens
        await resp.write(
            (
                head
                + dumps(text)
                + ',"logprobs":'
                + logprobs
                + ',"finish_reason":'
                + dumps(finish["type"] if finish else None)
                + ',"matched_stop":'
                + dumps(_matched(finish))
                + _token_ids(p, ids)
                + '}],"usage":'
                + (dumps(_usage(st)) if p.continuous_usage else "null")  # cumulative
                + "}\n\n"
            ).encode()
        )
    assert st is not None
    out = []
    base = {"id": rid, "object": "text_completion", "created": created, "model": p.model, "choices": []}
    if p.spec_details and (details := _spec_details(engine, st)) is not None:
        out.append(f"data: {dumps({**base, 'usage': None, 'sglext': {'spec_tokens_details': details}})}\n\n")
    if p.include_usage:
        usage = {k: v for k, v in _usage(st).items() if v is not None}  # model_dump_json(exclude_none=True)
        out.append(f"data: {dumps({**base, 'usage': usage})}\n\n")
    await resp.write("".join(out).encode() + DONE)
    await resp.write_eof()
    return resp


# -------------------------------------------------------------------- generate
def parse_generate(body: Any) -> tuple[GenParams, str | None] | web.Response:
    if not isinstance(body, dict):
        return validation_error([invalid_field((), "Input should be a valid dictionary or object to extract fields from", body, "model_attributes_type")])
    text = body.get("text")
    input_ids = body.get("input_ids")
    if text is None and input_ids is None:
        return json_response({"error": {"message": "Either text, input_ids or input_embeds should be provided."}}, status=400)
    if isinstance(text, list):
        if len(text) != 1:
            return bad_request("The simulator supports a single prompt per request.")
        text = text[0]
    if text is not None and not isinstance(text, str):
        return validation_error([invalid_field(("text",), "Input should be a valid string", text, "string_type")])
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        return validation_error([invalid_field(("sampling_params",), "Input should be a valid dictionary", sp, "dict_type")])
    errors: list[dict] = []
    max_new = _int_field(sp, "max_new_tokens", errors)
    ignore_eos = _bool_field(sp, "ignore_eos", errors)
    stream = _bool_field(body, "stream", errors)
    return_logprob = _bool_field(body, "return_logprob", errors)
    top_logprobs_num = _int_field(body, "top_logprobs_num", errors)
    logprob_text = _bool_field(body, "return_text_in_logprobs", errors)
    if errors:
        return validation_error(errors)
    if max_new is not None and max_new < 0:
        return bad_request(f"max_new_tokens must be at least 0, got {max_new}.")
    if text is not None:
        n_prompt, plan, cache = count_tokens(text), plan_output(text, ignore_eos), text_tokens(text)
    else:
        ids = input_ids[0] if input_ids and isinstance(input_ids[0], list) else input_ids
        n_prompt, plan, cache = max(1, len(ids or [])), plan_output("", ignore_eos), tuple(ids or ())
    rid = body.get("rid") if isinstance(body.get("rid"), str) else None
    params = GenParams(n_prompt, plan, 128 if max_new is None else max_new, stream, False, False, "",  # SamplingParams.max_new_tokens = 128
                       text=text or "", top_logprobs=(top_logprobs_num or 0) if return_logprob else None, logprob_text=logprob_text,
                       cache_tokens=cache)
    return params, rid


class GenerateLogprobs:
    """``meta_info``'s output logprobs of one /generate request, cumulative like its text:
    ``[logprob, id, text]`` per token (text only with return_text_in_logprobs) and the top
    alternatives in the same form."""

    def __init__(self, p: GenParams):
        self.p, self.with_text = p, p.logprob_text
        self.chosen: list[list] = []
        self.tops: list[list[list] | None] = []

    def add(self, ids: list[int]) -> None:
        for text, token_id, logprob, tops in logprob_entries(self.p.plan, len(self.chosen), ids, self.p.top_logprobs):
            self.chosen.append([logprob, token_id, text if self.with_text else None])
            self.tops.append([[lp, i, t if self.with_text else None] for t, i, lp in tops] or None)

    def meta(self) -> dict:
        return {"output_token_logprobs": self.chosen, "output_top_logprobs": self.tops}


def _generate_meta(engine: EngineClient, st: ReqState, finished: bool) -> dict:
    meta: dict[str, Any] = {
        "id": st.rid,
        "finish_reason": st.finish if finished else None,
        "prompt_tokens": st.prompt_tokens,
        "weight_version": WEIGHT_VERSION,
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": st.completion_tokens,
        "cached_tokens": 0,
    }
    if finished:
        meta["e2e_latency"] = st.e2e_latency
        meta.update(engine.spec_meta(st))
    return meta


async def generate(request: web.Request, engine: EngineClient, p: GenParams, rid: str | None) -> web.StreamResponse:
    gen = _open(request, engine, p, rid)
    logprobs = GenerateLogprobs(p) if p.top_logprobs is not None else None
    if not p.stream:
        text_parts: list[str] = []
        ids: list[int] = []
        st = None
        async for st, updates in gen:
            for u in updates:
                text_parts.append(u.text)
                ids.extend(u.ids)
        assert st is not None
        meta = _generate_meta(engine, st, True)
        if logprobs is not None:
            logprobs.add(ids)
            meta.update(logprobs.meta())
        return json_response({"text": "".join(text_parts), "output_ids": ids, "meta_info": meta})

    resp = await _start_sse(request)
    trace = trace_of(request)
    emitted = 0  # output tokens in the chunks written so far
    text = ""
    ids_json = ""  # grown incrementally: SGLang re-sends cumulative ids every chunk
    async for st, updates in gen:
        for u in updates:
            text += u.text
            if u.ids:
                more = ",".join(map(str, u.ids))
                ids_json = f"{ids_json},{more}" if ids_json else more
                if logprobs is not None:
                    logprobs.add(u.ids)
        finished = st.finish is not None and updates and updates[-1].finish is not None
        meta = _generate_meta(engine, st, bool(finished))
        if logprobs is not None:
            meta.update(logprobs.meta())
        chunk = '{"text":' + dumps(text) + ',"output_ids":[' + ids_json + '],"meta_info":' + dumps(meta) + "}"
        if trace is not None:
            trace.chunk(st.completion_tokens - emitted)
        emitted = st.completion_tokens
        await resp.write(b"data: " + chunk.encode() + b"\n\n")
    await resp.write(DONE)
    await resp.write_eof()
    return resp
