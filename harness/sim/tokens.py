"""Deterministic stand-in for a tokenizer and a model's output (no downloads).

Tokenizer ("word-piece"): text is split by the regex ``\\s*\\w+|\\s*[^\\w\\s]|\\s+`` --
each word together with its leading whitespace is one token, each punctuation
character (with its leading whitespace) is one token, and trailing whitespace is one
token.  ``"Count from 1 to 3."`` -> ``["Count", " from", " 1", " to", " 3", "."]``
= 6 tokens.  An empty prompt still counts as 1 token (a BOS).

Chat template: every message costs its content's pieces plus
``CHAT_TOKENS_PER_MESSAGE`` (role header / end-of-turn markers, like
``<|im_start|>user\\n ... <|im_end|>\\n``), and the generation prompt
(``<|im_start|>assistant\\n``) costs ``CHAT_GENERATION_PROMPT_TOKENS`` more.

Output ("the model"): if the prompt contains "count from 1 to N" (any case), the
output is the count ``"1, 2, 3, ..., N"`` as pieces ``"1" "," " 2" "," ... " N"``
(2N-1 tokens) followed by one EOS token (empty text, id ``EOS_TOKEN_ID``), so it
finishes with ``stop`` after 2N tokens unless ``max_new_tokens`` cuts it first
(``length``).  Any other prompt yields an endless deterministic stream of words
(a fixed word list walked with a prompt-dependent start), so it always finishes
with ``length``.  ``ignore_eos`` drops the EOS: the count is followed by words,
and the output runs to exactly ``max_new_tokens``.

Token ids: ``,`` = 11, the number k = 1000 + k, word w of ``WORDS`` = 100 + w,
EOS = ``EOS_TOKEN_ID``.

The output depends on the prompt (and ``ignore_eos``) alone, token by token: never on the
seed, the batch or speculation, which only decide *when* a token comes out. So a
speculative server generates exactly what a plain one does (it is lossless), unless
``--sim-lossy-rate`` lets a wrong draft through: then that position carries the model's
runner-up token instead (:func:`render`'s ``flipped``; which positions is drawn by
:func:`lossy_draw`, from the seed, the prompt's plan and the position).

Under forced acceptance (``SGLANG_SIMULATE_ACC_LEN`` or ``--sim-forced-accept-rates``,
harness/sim/model.py) the output is not the model's any more, as in SGLang, which fills every
token its verify step yields with id 100 (``predict.fill_(100)``): the plan is ``forced`` and
every token after the first (the prefill's, still the model's own) is ``FILLER_TEXT`` = " the",
id ``FILLER_TOKEN_ID`` = 100 (word 0, one piece), never the EOS, so such a request always runs
to its ``max_new_tokens``.

Logprobs (asked for with ``logprobs`` / ``top_logprobs`` / ``return_logprob``): at every
position the model is sure of its token (``TOP_LOGPROB``); its runner-up is
``RUNNER_UP_LOGPROB`` (a margin of 2.9 nats, far from a near-tie) and each further
alternative one nat below that. Alternatives are words (:func:`ranked`).
"""

from __future__ import annotations

import random
import re
import zlib
from typing import NamedTuple

CHAT_TOKENS_PER_MESSAGE = 4
CHAT_GENERATION_PROMPT_TOKENS = 3
EOS_TOKEN_ID = 2
COMMA_TOKEN_ID = 11
NUMBER_TOKEN_BASE = 1000
WORD_TOKEN_BASE = 100
MAX_COUNT = 1_000_000
TOP_LOGPROB = -0.1  # the model's own token at every position
RUNNER_UP_LOGPROB = -3.0  # its second choice; each further alternative is one nat less likely
FILLER_TOKEN_ID = WORD_TOKEN_BASE  # what a forced verify step yields: SGLang's fill id, 100 (WORDS[0])

_PIECE_RE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
_COUNT_RE = re.compile(r"count\s+from\s+1\s+to\s+(\d+)", re.IGNORECASE)

WORDS: tuple[str, ...] = tuple(
    """the quick brown fox jumps over a lazy dog while seven tired engineers
    measure every token that flows through speculative decoder under load and
    record how many drafts were accepted before verifier said no so tomorrow
    morning someone can compare numbers against yesterday with calm confidence
    because reproducible benchmarks make careful people happy again at night when quiet servers finally sleep deep inside racks""".split()
)  # 64 words: stepping by 7 (coprime) visits all of them
FILLER_TEXT = " " + WORDS[0]  # FILLER_TOKEN_ID's text: never the first token, so always with its space


def split_pieces(text: str) -> list[str]:
    """Split text into word-piece tokens (see module docstring)."""
    return _PIECE_RE.findall(text)


def count_tokens(text: str) -> int:
    """Prompt token count of plain text (at least 1, like a BOS)."""
    return max(1, len(_PIECE_RE.findall(text)))


def count_output_tokens(text: str) -> int:
    """Output token count of generated text: exactly its pieces, since the model's output
    is pieces (an EOS, which has no text, is the one token not among them)."""
    return len(_PIECE_RE.findall(text))


def chat_prompt_tokens(contents: list[str]) -> int:
    """Prompt token count of a chat after applying the simulated chat template."""
    total = CHAT_GENERATION_PROMPT_TOKENS
    for content in contents:
        total += len(_PIECE_RE.findall(content)) + CHAT_TOKENS_PER_MESSAGE
    return total


class OutputPlan(NamedTuple):
    """Everything needed to render output token ``i`` of a request, cheaply picklable."""

    count_n: int  # 0: no count, words only
    word_start: int
    ignore_eos: bool
    forced: bool = False  # forced acceptance: every token after the first is the filler (no EOS)

    def natural_length(self) -> int:
        """Tokens until (and including) the EOS; -1 if the output never ends by itself."""
        if self.count_n and not self.ignore_eos and not self.forced:
            return 2 * self.count_n
        return -1


def plan_output(prompt_text: str, ignore_eos: bool = False) -> OutputPlan:
    """Decide what the simulated model answers to this prompt."""
    m = _COUNT_RE.search(prompt_text)
    count_n = min(int(m.group(1)), MAX_COUNT) if m else 0
    word_start = zlib.crc32(prompt_text.encode("utf-8", "replace")) % len(WORDS)
    return OutputPlan(count_n, word_start, ignore_eos)


def _piece(plan: OutputPlan, i: int) -> tuple[str, int]:
    """Text and id of output token ``i``."""
    if plan.forced and i > 0:
        return FILLER_TEXT, FILLER_TOKEN_ID
    count_len = 2 * plan.count_n - 1 if plan.count_n else 0
    if i < count_len:
        if i & 1:
            return ",", COMMA_TOKEN_ID
        k = (i >> 1) + 1
        return (str(k) if k == 1 else f" {k}"), NUMBER_TOKEN_BASE + k
    if plan.count_n and not plan.ignore_eos:
        return "", EOS_TOKEN_ID
    j = i - count_len
    w = (plan.word_start + 7 * j) % len(WORDS)
    word = WORDS[w]
    return (word if i == 0 else " " + word), WORD_TOKEN_BASE + w


def _word_piece(w: int, i: int) -> tuple[str, int]:
    """Word ``w`` of WORDS as output token ``i`` (a leading space except at the start)."""
    return (WORDS[w] if i == 0 else " " + WORDS[w]), WORD_TOKEN_BASE + w


def ranked(plan: OutputPlan, i: int, n: int) -> list[tuple[str, int, float]]:
    """The model's ``n`` most likely tokens at position ``i``, best first, as (text, id,
    logprob): its own token, then words it did not pick."""
    text, token_id = _piece(plan, i)
    is_word = WORD_TOKEN_BASE <= token_id < WORD_TOKEN_BASE + len(WORDS)
    near = token_id - WORD_TOKEN_BASE if is_word else i % len(WORDS)  # alternatives start next to it
    out = [(text, token_id, TOP_LOGPROB)]
    for k in range(1, min(n, len(WORDS))):
        out.append((*_word_piece((near + k) % len(WORDS), i), RUNNER_UP_LOGPROB - (k - 1)))
    return out


def runner_up(plan: OutputPlan, i: int) -> tuple[str, int]:
    """The token a lossy verifier lets through at position ``i`` instead of the model's own."""
    text, token_id, _ = ranked(plan, i, 2)[1]
    return text, token_id


def lossy_draw(seed: int, plan: OutputPlan, i: int) -> float:
    """A number in [0, 1) fixed by the seed, the prompt's plan and the position: a drafted
    token at ``i`` comes out wrong when it is below ``--sim-lossy-rate``, the same way in
    every run."""
    return random.Random(f"{seed}/{plan.count_n}/{plan.word_start}/{plan.ignore_eos}/{i}").random()


def render(plan: OutputPlan, start: int, n: int, flipped: tuple[int, ...] = ()) -> tuple[str, list[int]]:
    """Text and token ids of output tokens ``start .. start+n-1``; positions in ``flipped``
    carry the runner-up token instead (a lossy speculation)."""
    texts: list[str] = []
    ids: list[int] = []
    for i in range(start, start + n):
        t, tid = runner_up(plan, i) if i in flipped else _piece(plan, i)
        texts.append(t)
        ids.append(tid)
    return "".join(texts), ids


def logprob_entries(plan: OutputPlan, start: int, ids: list[int], top_n: int) -> list[tuple]:
    """Per output token from position ``start`` (the ids as generated): ``(text, id,
    logprob, [(text, id, logprob), ...top_n alternatives])``."""
    entries = []
    for offset, token_id in enumerate(ids):
        tops = ranked(plan, start + offset, max(top_n, 2))
        text, _, logprob = next((t for t in tops if t[1] == token_id), (None, token_id, None))
        entries.append((text, token_id, logprob, tops[:top_n]))
    return entries
