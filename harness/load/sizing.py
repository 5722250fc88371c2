"""Random-word prompts of exactly ``workload.input_len`` tokens, counted by the served
model's tokenizer.

Where the count comes from (:class:`PromptTokenizer`), first that applies:

1. ``workload.tokenizer``: a local folder with the model's ``tokenizer.json`` (read with
   the ``tokenizers`` package, imported only then);
2. the server's own ``/tokenize`` route, where its engine has one (vLLM, SGLang): one
   request per count, so a load sizes its prompts before the warm-up, off the clock;
3. the simulator's exact word pieces (``engine=sim``).

Every count is what the server reports as ``prompt_tokens`` for the same text on the
completions API: special tokens such as a BOS included (``add_special_tokens``, the
default of ``tokenizers`` and of both ``/tokenize`` routes).

The sizing (:func:`sized_words`): a request's words are a seeded stream, so a longer
prompt extends a shorter one.  Start at ``input_len`` words, count, and scale the length
by the tokens a word took (the vocabulary's words are about one token each, so a step or
two lands; a small vocabulary's several tokens a word take a few more), kept between the
nearest prefixes found too short and too long.  When no prefix is exact (the next word is
several tokens and jumps over), end the longest prefix under the target (or nothing, when
one word is too long) with short filler words.  At most :data:`MAX_COUNTS` counts; a
target no prompt can hit (below one short word plus a BOS) gets the closest.  In duration
mode only the warm-up is sized ahead: later prompts are sized as they are needed, in a
thread, while the load runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.http_client import ClientError, ServerClient
from harness import project_path

CountPromptTokens = Callable[[str], int]
Words = Callable[[int], list[str]]  # the first n words of one request's seeded stream

MAX_COUNTS = 16  # counts per prompt: each is a request when the server counts
FILLERS = ("the", "of", "and", "to", "in")  # one token with a leading space in every tokenizer seen


class SizingError(ValueError):
    """Prompts cannot be sized as configured (one sentence)."""


@dataclass(frozen=True)
class PromptTokenizer:
    source: str  # says where the counts come from, in the record and the mismatch report
    count: CountPromptTokens
    remote: bool = False  # each count is a request to the server: size before the load, in a thread


def sized_words(words: Words, target: int, count: CountPromptTokens) -> str:
    """The prefix of ``words`` (ended with fillers when needed) that counts ``target`` tokens."""
    n, below, above = max(1, target), None, None  # below/above: (words, tokens) of the nearest misses
    for _ in range(MAX_COUNTS // 2):
        text = " ".join(words(n))
        tokens = count(text)
        if tokens == target:
            return text
        if tokens < target:
            below = max(below or (0, 0), (n, tokens))
        else:
            above = min(above or (n + 1, 0), (n, tokens))
        n = _next_length(_scaled(n, tokens, target), below, above)
        if n is None:
            break
    start, tokens = (" ".join(words(below[0])), below[1]) if below else ("", 0)
    # the longest prefix under the target, ended with fillers; when even one word is too
    # long and no filler alone fits, the shortest prompt is the closest there is
    return _filled(start, tokens, target, count) or " ".join(words(above[0] if above else 1))


def _scaled(n: int, tokens: int, target: int) -> int:
    """The length the last count's tokens per word point to (one word further at least)."""
    guess = round(n * target / max(1, tokens))
    return guess if guess != n else n + (1 if tokens < target else -1)


def _next_length(guess: int, below: tuple[int, int] | None, above: tuple[int, int] | None) -> int | None:
    """``guess`` kept strictly between the nearest misses; None when no length is left there."""
    low = below[0] + 1 if below else 1
    high = above[0] - 1 if above else max(guess, low)
    return None if low > high else min(max(guess, low), high)


def _filled(text: str, tokens: int, target: int, count: CountPromptTokens) -> str:
    """``text`` (``tokens`` long) ended with fillers up to ``target``, within the budget of counts."""
    budget = MAX_COUNTS // 2
    while tokens < target and budget > 0:
        for filler in FILLERS:
            budget -= 1
            candidate = f"{text} {filler}" if text else filler
            longer = count(candidate)
            if longer <= target:
                text, tokens = candidate, longer
                break
            if budget == 0:
                break
        else:
            break  # no filler fits: every one jumps over
    return text


# --- the three sources ------------------------------------------------------------------


def local_tokenizer(folder: str) -> PromptTokenizer:
    """``workload.tokenizer``: a folder with ``tokenizer.json`` (or that file itself)."""
    path = project_path(folder)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise SizingError(f"workload.tokenizer={folder}: no tokenizer.json at {file}")
    try:
        from tokenizers import Tokenizer  # only for runs that ask for it: not a dependency of the rest
    except ImportError:
        raise SizingError(f"workload.tokenizer={folder} needs the `tokenizers` package, which is not installed "
                          f"here (pip install tokenizers)") from None
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the package raises its own Exception for a file it cannot parse
        raise SizingError(f"workload.tokenizer={folder}: {file} is not a tokenizer the `tokenizers` package "
                          f"reads ({exc})") from None
    return PromptTokenizer(f"tokenizer {file}", lambda text: len(tokenizer.encode(text).ids))


def server_tokenizer(base_url: str, route: str, model: str) -> PromptTokenizer:
    """The server's ``POST route {"model", "prompt"}`` -> ``{"count", "tokens", ...}``
    (vLLM's and SGLang's ``/tokenize``)."""
    client = ServerClient(base_url)

    def count(text: str) -> int:
        try:
            answer = client.post_json(route, {"model": model, "prompt": text}).json()
        except (ClientError, ValueError) as exc:
            raise SizingError(f"sizing prompts by the server's {route} failed (set workload.tokenizer to the "
                              f"model's tokenizer folder instead): {exc}") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("count"), int):
            raise SizingError(f"the server's {route} answered without an integer count: {str(answer)[:120]}")
        return answer["count"]

    return PromptTokenizer(f"the server's {route}", count, remote=True)
