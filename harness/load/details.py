"""What a request generated, beyond its timings: its text and, where the engine returned
them, its output token ids and the top logprobs at each position. The lossless gate
(harness/gates/lossless.py) compares arms on these.

The read loops only append what each event carries (one reference per chunk); the
functions here turn those pieces into per-position lists once the stream has ended, so
the hot path does no parsing of its own. The shapes read:

- ``choice.token_ids``: the chunk's new output token ids (vLLM and SGLang, asked for with
  ``return_token_ids``);
- chat ``choice.logprobs.content``: ``[{token, logprob, top_logprobs: [{token, logprob}]}]``;
- completions ``choice.logprobs``: ``{tokens, token_logprobs, top_logprobs: [{token: logprob}]}``;
- SGLang ``/generate``: ``output_ids``, and ``meta_info.output_token_logprobs``
  (``[[logprob, id, text]]``) and ``output_top_logprobs`` (``[[[logprob, id, text], ...]]``),
  re-sent whole with every chunk by default, only the new part with
  ``--incremental-streaming-output``: :func:`settle` tells which from the token count.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.load.records import RequestRecord


def best_first(pairs: Iterable[list]) -> list[list]:
    """``[[token, logprob], ...]`` ordered from the most likely down."""
    return sorted(pairs, key=lambda pair: -pair[1] if isinstance(pair[1], (int, float)) else float("inf"))


def chat_logprobs(chunks: list[dict]) -> tuple[list[str], list[list[list]]]:
    """Tokens and top logprobs per position from each chunk's ``choice.logprobs``."""
    tokens, tops = [], []
    for logprobs in chunks:
        for entry in logprobs.get("content") or ():
            tokens.append(entry.get("token"))
            tops.append(best_first([alt.get("token"), alt.get("logprob")] for alt in entry.get("top_logprobs") or ()))
    return tokens, tops


def completion_logprobs(chunks: list[dict]) -> tuple[list[str], list[list[list]]]:
    """The same from the completions shape, whose alternatives are a ``{token: logprob}`` dict."""
    tokens, tops = [], []
    for logprobs in chunks:
        chunk_tokens = logprobs.get("tokens") or []
        alternatives = logprobs.get("top_logprobs") or []
        for i, token in enumerate(chunk_tokens):
            alts = alternatives[i] if i < len(alternatives) else None
            tokens.append(token)
            tops.append(best_first([t, lp] for t, lp in (alts or {}).items()))
    return tokens, tops


def keep_openai(rec: RequestRecord, chat: bool, id_chunks: list[list[int]], logprob_chunks: list[dict]) -> None:
    """An OpenAI stream's token ids and logprobs into ``rec`` (its text is set by the reader)."""
    if id_chunks:
        rec.token_ids = [token_id for chunk in id_chunks for token_id in chunk]
    if logprob_chunks:
        tokens, tops = (chat_logprobs if chat else completion_logprobs)(logprob_chunks)
        rec.tokens = tokens or None
        rec.top_logprobs = tops if any(tops) else None


def settle(pieces: list, total: int | None) -> tuple[Any, bool | None]:
    """One request's whole output from per-chunk pieces that are either cumulative (the last
    one is everything) or incremental (they add up): ``(output, cumulative)``, or
    ``(None, None)`` when neither adds up to ``total`` tokens."""
    if not pieces or total is None:
        return None, None
    if len(pieces[-1]) == total:
        return pieces[-1], True
    joined = [item for piece in pieces for item in piece]
    return (joined, False) if len(joined) == total else (None, None)


def growing(texts: list[str]) -> bool:
    """Whether each text extends the one before (cumulative chunks)."""
    return all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:]))


def keep_generate(rec: RequestRecord, texts: list[str], id_chunks: list[list[int]],
                  logprob_chunks: list[list], top_chunks: list[list]) -> None:
    """A ``/generate`` stream's text, ids and logprobs into ``rec``, once its
    ``completion_tokens`` is known."""
    total = rec.completion_tokens
    rec.token_ids, cumulative = settle(id_chunks, total)
    if cumulative is None:
        cumulative = growing(texts)
    rec.text = (texts[-1] if cumulative else "".join(texts)) if texts else None
    chosen, _ = settle(logprob_chunks, total)
    if chosen:
        rec.tokens = [token_of(entry) for entry in chosen]
    tops, _ = settle(top_chunks, total)
    if tops and any(tops):
        rec.top_logprobs = [best_first([token_of(alt), alt[0]] for alt in position or ()) for position in tops]


def token_of(entry: list) -> str | None:
    """SGLang's ``[logprob, id, text]``: the text (asked for with return_text_in_logprobs),
    else the id as text."""
    if len(entry) > 2 and entry[2] is not None:
        return entry[2]
    return str(entry[1]) if len(entry) > 1 else None
