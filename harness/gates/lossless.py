"""The lossless gate's comparison. Speculative decoding must leave outputs unchanged under
greedy decoding, so each request of a speculative arm must generate exactly what the same
request generated in the arm it is compared with (``gate.lossless: {arm: {against: ...}}``).

Requests are matched by repeat, index and turn: every arm sends the same prompts in the same
order; warm-ups are left out. A request that failed or was cancelled (workload.cancel: its
text cut short) in either arm, or was sent in one arm only, cannot be compared: it is
counted and said, neither a match nor a mismatch. The exact-match rate is over the requests
compared, by their whole generated text. For each mismatch, the first diverging position:

- by token ids, when both arms returned them;
- else by token, when both returned each token's text with its logprobs;
- else by character of the text, and the verdict says so (with the word around it).

There the reference arm's margin -- its top-1 minus top-2 logprob -- tells a near-tie flip
from a defect. Below :data:`NEAR_TIE_NATS` the reference itself barely preferred its token:
floating-point sums taken in another order (several drafted tokens verified in one forward
instead of one token per step) can swap two such tokens, so the flip says little about the
speculation. At or above it the reference was sure, and the other token is a real defect.
Both count as mismatches; ``min_exact_match`` decides how many are allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NEAR_TIE_NATS = 0.1  # a reference margin (top-1 minus top-2 logprob) below this makes a divergence a near-tie flip
IMPLIED_TOP_LOGPROBS = 2  # asked for by a lossless gate when workload.logprobs is null: the margin needs two
LISTED_NOT_COMPARABLE = 3  # requests named when some could not be compared; the rest are counted


def top_logprobs_to_ask(cfg: Any) -> int | None:
    """How many top logprobs each request asks for, along with its token ids: None for
    neither. ``workload.logprobs`` when set (0: ids only); else IMPLIED_TOP_LOGPROBS when the
    experiment declares a lossless gate (every arm asks: the compared one needs them too)."""
    asked = cfg.workload.logprobs
    if asked is not None:
        return int(asked)
    return IMPLIED_TOP_LOGPROBS if cfg.gate.lossless else None


@dataclass(frozen=True)
class Side:
    """One arm's token at the diverging position: None when its output had ended there."""

    arm: str
    token: str | None
    token_id: int | None = None

    def __str__(self) -> str:
        if self.token is None and self.token_id is None:
            return f"{self.arm} nothing (its output had ended)"
        shown = repr(self.token) if self.token is not None else "?"
        return f"{self.arm} {shown}" + (f" (id {self.token_id})" if self.token_id is not None else "")


@dataclass(frozen=True)
class Divergence:
    """Where one request's output first differs between the reference and the other arm."""

    request: str  # "request 3" (with its repeat when the arm ran several)
    position: int  # 0-based, in `unit`s
    unit: str  # "token" or "character"
    by: str  # "token ids", "tokens" or "characters (no token ids)"
    reference: Side
    candidate: Side
    margin: float | None  # the reference's top-1 minus top-2 logprob there, in nats; None: no logprobs
    word: int | None = None  # by characters: the word's number (0-based) in the reference's text

    @property
    def kind(self) -> str:
        """"near-tie flip", "real divergence" or "unknown" (no margin to judge by)."""
        if self.margin is None:
            return "unknown"
        return "near-tie flip" if self.margin < NEAR_TIE_NATS else "real divergence"

    def describe(self) -> str:
        where = f"{self.unit} {self.position}" + (f" (word {self.word})" if self.word is not None else "")
        return f"{self.request} at {where}, by {self.by}: {self.reference}, {self.candidate}; {self.judgement()}"

    def judgement(self) -> str:
        arm = self.reference.arm
        if self.margin is None:
            return f"no logprobs of {arm} there, so a near-tie flip cannot be told from a defect"
        if self.kind == "near-tie flip":
            return (f"{arm}'s top-1 minus top-2 logprob there is {self.margin:.3f} nats < {NEAR_TIE_NATS:g}: a near-tie "
                    f"flip (its top two were nearly equal, which float rounding can swap), not by itself a defect")
        return (f"{arm}'s top-1 minus top-2 logprob there is {self.margin:.2f} nats ≥ {NEAR_TIE_NATS:g}: a real "
                f"divergence ({arm} was sure of its token), a defect, not a near-tie flip")


@dataclass
class Comparison:
    """The requests of one arm against the reference arm's."""

    identical: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    not_comparable: list[str] = field(default_factory=list)  # "request 3 failed in eagle3", ...

    @property
    def compared(self) -> int:
        return self.identical + len(self.divergences)

    @property
    def exact_match(self) -> float | None:
        return self.identical / self.compared if self.compared else None


def compare(reference_arm: str, reference_lines: list[dict], arm: str, lines: list[dict]) -> Comparison:
    """Each measured request of ``arm`` against the same request of ``reference_arm``
    (the request lines of each)."""
    theirs, mine = by_request(reference_lines), by_request(lines)
    repeats = len({key[0] for key in [*theirs, *mine]})
    comparison = Comparison()
    for key in sorted(set(theirs) | set(mine)):
        label = request_label(key, repeats)
        reason = why_not_comparable(key, theirs, mine, reference_arm, arm)
        if reason is not None:
            comparison.not_comparable.append(f"{label} {reason}")
        elif theirs[key].get("text") == mine[key].get("text"):
            comparison.identical += 1
        else:
            comparison.divergences.append(first_divergence(label, reference_arm, theirs[key], arm, mine[key]))
    return comparison


RequestKey = tuple[int, int, int]  # (repeat, index, turn): a dataset's conversation shares its index


def by_request(lines: list[dict]) -> dict[RequestKey, dict]:
    return {(int(line.get("repeat") or 0), int(line["index"]), int(line.get("turn") or 0)): line
            for line in lines if not line.get("warmup")}


def request_label(key: RequestKey, repeats: int) -> str:
    repeat, index, turn = key
    return (f"request {index}" + (f" turn {turn + 1}" if turn else "")
            + (f" of repeat {repeat}" if repeats > 1 else ""))


def why_not_comparable(key: RequestKey, theirs: dict, mine: dict, reference_arm: str, arm: str) -> str | None:
    for name, lines in ((reference_arm, theirs), (arm, mine)):
        if key not in lines:
            return f"was not sent in {name}"
    for name, lines in ((reference_arm, theirs), (arm, mine)):
        if lines[key].get("cancelled"):  # workload.cancel cut its text short on purpose
            return f"was cancelled in {name}"
        if not lines[key].get("ok") or lines[key].get("text") is None:
            return f"failed in {name}"
    return None


def first_divergence(label: str, reference_arm: str, ref: dict, arm: str, other: dict) -> Divergence:
    """The first position where ``other``'s output leaves ``ref``'s."""
    for by, key in (("token ids", "token_ids"), ("tokens", "tokens")):
        ref_sequence, other_sequence = ref.get(key), other.get(key)
        if ref_sequence is not None and other_sequence is not None and ref_sequence != other_sequence:
            at = first_difference(ref_sequence, other_sequence)
            return Divergence(label, at, "token", by, side(reference_arm, ref, at), side(arm, other, at),
                              margin_at(ref, at))
    text, other_text = ref["text"], other["text"]
    at = first_difference(text, other_text)
    return Divergence(label, at, "character", "characters (no token ids)", Side(reference_arm, word_at(text, at)),
                      Side(arm, word_at(other_text, at)), None, word=word_number(text, at))


def first_difference(a, b) -> int:
    """The first index where two sequences differ (the shorter one's length when one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def side(arm: str, line: dict, at: int) -> Side:
    tokens, ids = line.get("tokens") or [], line.get("token_ids") or []
    return Side(arm, tokens[at] if at < len(tokens) else None, ids[at] if at < len(ids) else None)


def margin_at(line: dict, at: int) -> float | None:
    """The top-1 minus top-2 logprob at position ``at`` (None without two of them)."""
    tops = line.get("top_logprobs") or []
    if at >= len(tops) or len(tops[at] or []) < 2:
        return None
    first, second = tops[at][0][1], tops[at][1][1]
    if not isinstance(first, (int, float)) or not isinstance(second, (int, float)):
        return None
    return first - second


def word_at(text: str, at: int) -> str | None:
    """The word of ``text`` that holds character ``at`` (the character itself when it is
    whitespace; None past the text's end)."""
    if at >= len(text):
        return None
    if text[at].isspace():
        return text[at]
    start, end = at, at
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[start:end]


def word_number(text: str, at: int) -> int:
    """The 0-based number of the word that holds character ``at``."""
    before = text[:at].split()
    inside = at > 0 and not text[at - 1].isspace()  # `at` continues the last word before it
    return len(before) - 1 if inside else len(before)


def summary(comparison: Comparison, arm: str, reference_arm: str, floor: float) -> str:
    """The verdict in words: the rate, the mismatches by kind, the first divergence, what
    could not be compared."""
    compared, rate = comparison.compared, comparison.exact_match
    if not compared:
        return f"{arm}: no request could be compared with {reference_arm}'s{not_comparable(comparison)}"
    words = (f"{arm}: {comparison.identical} of {compared} requests generated exactly what they did in {reference_arm} "
             f"({rate:.1%} exact match, gate ≥ {floor:.1%})")
    if comparison.divergences:
        first = comparison.divergences[0]
        words += f"; {len(comparison.divergences)} diverged ({kinds(comparison.divergences)}); the first: "
        words += first.describe()
    return words + not_comparable(comparison)


def kinds(divergences: list[Divergence]) -> str:
    counts = {kind: sum(d.kind == kind for d in divergences) for kind in ("real divergence", "near-tie flip")}
    parts = [f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in counts.items()]
    unknown = sum(d.kind == "unknown" for d in divergences)
    return ", ".join(parts + ([f"{unknown} without logprobs to tell"] if unknown else []))


def not_comparable(comparison: Comparison) -> str:
    reasons = comparison.not_comparable
    if not reasons:
        return ""
    listed = "; ".join(reasons[:LISTED_NOT_COMPARABLE]) + ("; ..." if len(reasons) > LISTED_NOT_COMPARABLE else "")
    return f"; {len(reasons)} request(s) not comparable ({listed})"
