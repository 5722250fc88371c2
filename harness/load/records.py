"""What one load leaves behind: a record per request, and the load's span around them.

Plain data with no imports from the rest of the harness, so the request functions,
the load runner, metrics and the recorder can all share it without a cycle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    index: int  # the load's entry: a request, or a conversation whose turns share it
    warmup: bool
    turn: int = 0  # which turn of its conversation (0-based); always 0 for a single prompt
    dataset_row: int | None = None  # the dataset row it came from (0-based), None without a dataset
    category: str | None = None  # that row's category
    send_time: float = 0.0  # perf_counter seconds
    # when the arrival process meant it to go (perf_counter s; harness/load/client_health.py): None: not scheduled
    scheduled_time: float | None = None
    # a trace replay's own time for it (perf_counter s), which the concurrency cap does not move; None: no trace
    intended_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk that carried tokens
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in that chunk
    status: int | None = None  # HTTP status
    error: str | None = None  # server's message or what went wrong; None = ok
    prompt_tokens: int | None = None  # the server's count (its usage)
    intended_prompt_tokens: int | None = None  # what the prompt was sized to (workload.input_len); None: not sized
    max_tokens: int | None = None  # the output length asked for (workload.max_tokens or the row's own)
    ignore_eos: bool = False  # asked to generate exactly max_tokens
    completion_tokens: int | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    # the drafts its verify cycles accepted, where the engine counts them per request (vLLM's
    # per-request stats): its accept length is then 1 + accepted ÷ cycles (harness/measure/samples.py)
    spec_accepted_drafts: int | None = None
    # verify cycles by how many drafts each accepted ([k]: cycles with k accepted), where the engine says
    spec_correct_drafts_histogram: list[int] | None = None
    finish_reason: str | None = None
    model: str | None = None  # the model the server's answer named (None: it named none, as /generate's)
    end_time: float | None = None
    answer: str | None = field(default=None, repr=False)  # the streamed text, kept only for a next turn's history
    # What it generated (harness/load/details.py): the text always; the rest where the
    # engine returned them, which it is asked to only when a lossless gate compares arms
    text: str | None = None
    token_ids: list[int] | None = None  # output token ids
    tokens: list[str] | None = None  # each output token as text (from its logprobs)
    top_logprobs: list[list[list]] | None = None  # per output token: [[token, logprob], ...] best first
    run_start: float | None = field(default=None, repr=False)  # t0 of to_json(); set by the load runner
    # workload.cancel (harness/load/cancel.py): where the client is to close this request's stream
    # (after this many tokens, or ms after it was sent; None: not chosen), and whether it did
    cancel_after_tokens: int | None = None
    cancel_after_ms: float | None = None
    cancelled: bool = False  # the client closed the stream on purpose: neither ok nor failed

    @property
    def ok(self) -> bool:
        return self.error is None and not self.cancelled and self.status == 200 and self.end_time is not None

    @property
    def failed(self) -> bool:
        """Did not complete, and not because the client cancelled it (harness/load/cancel.py)."""
        return not self.ok and not self.cancelled

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times[0] - self.send_time if self.chunk_times else None

    @property
    def send_gap_s(self) -> float | None:
        """How late the client sent it: send time minus its scheduled time."""
        return self.send_time - self.scheduled_time if self.scheduled_time is not None and self.send_time else None

    @property
    def e2e_s(self) -> float | None:
        return self.end_time - self.send_time if self.end_time is not None else None

    @property
    def decode_s(self) -> float | None:
        """Last token chunk minus first token chunk (0.0 for a single chunk)."""
        return self.chunk_times[-1] - self.chunk_times[0] if self.chunk_times else None

    def to_json(self, t0: float | None = None) -> dict:
        """One request's row of the record (docs/record.md).  Times in ms; absolute ones (send, end, chunks)
        relative to ``t0``, by default the run start that the load runner stamped on the
        record (else this request's own send time)."""
        if t0 is None:
            t0 = self.run_start if self.run_start is not None else self.send_time

        def ms(x: float | None) -> float | None:
            return None if x is None else round(x * 1000.0, 3)

        return {
            "index": self.index,
            "warmup": self.warmup,
            "turn": self.turn,
            "dataset_row": self.dataset_row,
            "category": self.category,
            "ok": self.ok,
            "status": self.status,
            "error": self.error,
            "cancelled": self.cancelled,
            "cancel_after_tokens": self.cancel_after_tokens,
            "cancel_after_ms": self.cancel_after_ms,
            "send_ms": ms(self.send_time - t0),
            "end_ms": ms(None if self.end_time is None else self.end_time - t0),
            "send_gap_ms": ms(self.send_gap_s),
            "intended_ms": ms(None if self.intended_time is None else self.intended_time - t0),
            "ttft_ms": ms(self.ttft_s),
            "e2e_ms": ms(self.e2e_s),
            "decode_ms": ms(self.decode_s),
            "prompt_tokens": self.prompt_tokens,
            "intended_prompt_tokens": self.intended_prompt_tokens,
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
            "completion_tokens": self.completion_tokens,
            "spec_verify_ct": self.spec_verify_ct,
            "spec_accept_length": self.spec_accept_length,
            "spec_accepted_drafts": self.spec_accepted_drafts,
            "spec_correct_drafts_histogram": self.spec_correct_drafts_histogram,
            "finish_reason": self.finish_reason,
            "model": self.model,
            "chunk_ms": [round((t - t0) * 1000.0, 3) for t in self.chunk_times],
            "chunk_tokens": list(self.chunk_tokens),
            "text": self.text,
            "token_ids": self.token_ids,
            "tokens": self.tokens,
            "top_logprobs": self.top_logprobs,
        }


@dataclass
class LoadResult:
    records: list[RequestRecord]  # warm-up ones included, flagged
    start_time: float  # first measured send (perf_counter s)
    end_time: float  # last measured end
    api: str
    model: str
    run_start: float = 0.0  # before the first warm-up request: t0 of the record's request times
    prompt_sizing: str | None = None  # what counted the prompts' tokens (harness.load.sizing); None: not sized
    client: dict | None = None  # the client's own health over the load (harness/load/client_health.py)
    # the load's shape, which its steady window depends on (harness/measure/steady.py)
    concurrency: int = 1  # closed loop: slots; open loop: the cap
    request_rate: float | None = None  # open loop: arrivals per second (None: closed loop)
    cancel: dict | None = None  # workload.cancel as the load applied it (harness/load/cancel.py); None: off
    trace_content: dict | None = None  # a trace replay's prompts: filler or a corpus (LoadPlan.trace_content)

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end_time - self.start_time)


def measured_window(records: list[RequestRecord]) -> tuple[float, float]:
    """(first send, last end) of the measured requests: the load's window (now, now without any)."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        now = time.perf_counter()
        return now, now
    return (min(r.send_time for r in measured),
            max(r.end_time if r.end_time is not None else r.send_time for r in measured))
