"""A load as typed values: what it sends, to whom, how many and how fast. Built once at the
boundary (`LoadPlan.of`) from the workload config and the engine's hooks; from then on the
load (harness/load/runner.py, loop.py, processes.py) reads only the plan, never a config
tree, as vLLM's request functions take a `RequestFuncInput`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.load.cancel import CancelPlan
from harness.load.crosscheck import CountTokens
from harness.load.prompts import PromptSource, RandomWords, prompt_source
from harness.load.shared_prefix import SharedPrefixPrompts, shared_prefix_source
from harness.load.requests import RequestExtras, RequestFunc, Sampling, SpecDetails, request_func
from harness.load.sizing import PromptTokenizer
from harness.load.datasets import dataset_digest
from harness.load.trace import Replay, replay_of
from harness.load.trace_prompts import Corpus, TracePrompts


@dataclass(frozen=True)
class LoadPlan:
    """One load against one server (see harness/load/runner.py for what a load is)."""

    base_url: str
    request: RequestFunc  # the API's request: the model, sampling, and the engine's fields and stream hooks
    prompts: PromptSource  # what each entry sends (a fixed prompt, random words, a dataset's rows)
    prompt_sizing: str | None  # where random prompts' token counts come from (the record says), if sized
    num_prompts: int | None  # measured entries; None when duration_s is set
    duration_s: float | None  # or: every entry that starts within this many seconds
    concurrency: int  # closed loop: in flight at once; open loop: the cap
    request_rate: float | None  # open loop: arrivals per second (None: closed loop)
    burstiness: float | None  # open loop: gamma shape (None or 1: Poisson)
    seed: int
    warmup_requests: int  # sent first, one at a time, never measured
    prewarm_connections: bool  # open every connection before the measured requests
    timeout_s: float  # per request, the whole of it
    first_byte_timeout_s: float | None  # until the response's first byte
    client_processes: int = 1  # load processes the measured requests are split over
    cancel: CancelPlan | None = None  # the measured requests the client abandons mid-stream (None: none)
    trace_offsets_s: tuple[float, ...] | None = None  # a trace replay: each request's send offset (speed-up applied)
    client_placement: str = "local"  # local: forked processes here; ray: Ray actors (harness/load/ray_clients.py)
    ray_address: str | None = None  # the Ray cluster the actors join; None: a local Ray instance
    trace_content: dict | None = None  # a trace replay: what its prompts say ({"kind": "filler"} or a corpus's file and digest)

    @classmethod
    def of(cls, workload: Any, base_url: str, model: str, *, request_extras: RequestExtras | None = None,
           spec_details: SpecDetails | None = None, count_tokens: CountTokens | None = None,
           prompt_tokenizer: PromptTokenizer | None = None) -> "LoadPlan":
        """The plan of `workload` (a workload config) against `base_url` serving `model`.

        The engine's hooks: ``request_extras(api)`` gives extra JSON fields for every request
        body, ``spec_details(event)`` picks speculative statistics out of one parsed event of
        an OpenAI stream (:mod:`harness.load.requests`), ``count_tokens(text)`` is the
        server's exact tokenizer where the engine knows it (:mod:`harness.load.crosscheck`),
        ``prompt_tokenizer`` sizes random-word prompts to ``workload.input_len`` tokens
        (:mod:`harness.load.sizing`). None of them: a generic OpenAI client."""
        api = str(workload.api)
        request = request_func(api, model,
                               Sampling(int(workload.max_tokens), float(workload.temperature), bool(workload.ignore_eos)),
                               extras=request_extras(api) if request_extras is not None else None,
                               spec_details=spec_details, count_tokens=count_tokens)
        replay = replay_of(workload) if getattr(workload, "trace", None) else None
        corpus = trace_corpus(workload, replay)
        if replay is not None:  # the trace's requests replace the prompt, the count and the arrivals
            prompts: PromptSource = TracePrompts(replay, int(getattr(workload, "seed", 0) or 0), prompt_tokenizer, corpus)
        else:
            prompts = shared_prefix_source(workload, prompt_tokenizer) or prompt_source(workload, prompt_tokenizer)
        sized = prompt_tokenizer is not None and isinstance(prompts, (RandomWords, SharedPrefixPrompts, TracePrompts))
        duration_s = None if workload.duration_s is None or replay else float(workload.duration_s)
        if duration_s is None and workload.num_prompts is None and replay is None:
            raise ValueError("workload needs num_prompts or duration_s")
        first_byte = workload.first_byte_timeout_s
        return cls(
            base_url=base_url, request=request, prompts=prompts,
            prompt_sizing=prompt_tokenizer.source if sized else None,
            # a trace's window is the count; a duration replaces the count
            num_prompts=(len(replay.requests) if replay else
                         None if duration_s is not None else int(workload.num_prompts)),
            duration_s=duration_s,
            concurrency=max(1, int(workload.concurrency or 1)),
            # a trace is an open loop at its mean rate (the steady window's rule)
            request_rate=(replay.mean_rate if replay else
                          None if workload.request_rate is None else float(workload.request_rate)),
            burstiness=None if getattr(workload, "burstiness", None) is None else float(workload.burstiness),
            seed=int(getattr(workload, "seed", 0) or 0),
            warmup_requests=int(workload.warmup_requests or 0),
            prewarm_connections=bool(getattr(workload, "prewarm_connections", False)),
            timeout_s=float(workload.timeout_s),
            first_byte_timeout_s=None if first_byte is None else float(first_byte),
            client_processes=int(getattr(workload, "client_processes", 1) or 1),
            cancel=CancelPlan.of(workload),
            trace_offsets_s=replay.offsets_s if replay else None,
            client_placement=str(getattr(workload, "client_placement", "local") or "local"),
            ray_address=None if getattr(workload, "ray_address", None) is None else str(workload.ray_address),
            trace_content=content_of(corpus) if replay else None,
        )


def trace_corpus(workload: Any, replay: Replay | None) -> Corpus | None:
    """workload.trace_content's corpus, its categories checked against the replay's (None: filler)."""
    content = getattr(workload, "trace_content", None)
    if replay is None or not content:
        return None
    corpus = Corpus.of(str(content))
    corpus.check(replay.requests, str(workload.trace))
    return corpus


def content_of(corpus: Corpus | None) -> dict:
    """What a replay's prompts said, for the record: filler, or the corpus file and its sha256."""
    if corpus is None:
        return {"kind": "filler"}
    return {"kind": "corpus", "file": corpus.source, "sha256": dataset_digest(corpus.source)}

