"""The search of a bisect, whatever judges a value: which value to probe next, and what the
probes so far decided. The driver judges a value by an A/B against the good end
(harness/bisect/driver.py); the tests by a table.

It first checks the ends (the last value against the first must be a regression: else there
is nothing to bisect, and it says so), then probes the value nearest the middle of what is
still open: a regression moves the bad end to it, the same (every verdict passed: an
equivalence, not "no difference found") moves the good end. A value that cannot be measured
(its server does not start: an unbuildable build) is skipped with its reason, as
`git bisect skip`, and the next one nearest the middle is probed; if only skipped values are
left between the ends, the first bad one is one of them or the bad end, and it says which. An
A/B that cannot decide stops the search there (undecided), keeping what it decided.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

REGRESSED, SAME, UNDECIDED, SKIPPED = "regressed", "same", "undecided", "skipped"  # a probe's outcome


@dataclass
class Probe:
    """One value judged against the good end."""

    index: int  # its place in the list
    value: str
    outcome: str  # regressed | same | undecided | skipped
    why: str  # in words: the A/B's verdicts, or why it could not be measured
    record: Optional[str] = None  # the A/B record folder
    rounds: Optional[int] = None  # rounds the A/B ran

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Search:
    values: list[str]
    judge: Callable[[int], Probe]  # value index -> its probe against the good end (values[0])
    on_probe: Callable[[Probe], None] = lambda probe: None
    probes: list[Probe] = field(default_factory=list)
    good: int = 0  # the last value known good (same as the first)
    bad: Optional[int] = None  # the first value known bad, once the ends are checked
    stopped: Optional[str] = None  # why the search ended without a first bad value, in words
    done: bool = False  # the search ran to its end (not stopped by an interrupt)

    def run(self) -> None:
        self.search()
        self.done = True

    def search(self) -> None:
        last = len(self.values) - 1
        ends = self.probe(last)
        if ends.outcome != REGRESSED:
            self.stopped = self.ends_not_bad(ends)
            return
        self.bad = last
        while (index := self.next_index()) is not None:
            probe = self.probe(index)
            if probe.outcome == REGRESSED:
                self.bad = index
            elif probe.outcome == SAME:
                self.good = index
            elif probe.outcome == UNDECIDED:
                self.stopped = (f"the A/B of {self.values[index]} against {self.values[0]} could not decide "
                                f"({probe.why}); the first bad value lies after {self.values[self.good]}, at or "
                                f"before {self.values[self.bad]}")
                return

    def probe(self, index: int) -> Probe:
        found = self.judge(index)
        self.probes.append(found)
        self.on_probe(found)
        return found

    def next_index(self) -> Optional[int]:
        """The open value nearest the middle of good and bad (None: nothing open)."""
        tried = {p.index for p in self.probes if p.outcome == SKIPPED}
        open_ = [i for i in range(self.good + 1, self.bad) if i not in tried]
        if not open_:
            return None
        middle = (self.good + self.bad) / 2
        return min(open_, key=lambda i: (abs(i - middle), i))

    def ends_not_bad(self, ends: Probe) -> str:
        first, last = self.values[0], self.values[-1]
        if ends.outcome == SAME:
            return (f"the last value {last} is no worse than the first {first} ({ends.why}): there is no regression "
                    f"between the ends to bisect")
        if ends.outcome == SKIPPED:
            return f"the last value {last} could not be measured against the first {first}: {ends.why}"
        return f"the A/B of the last value {last} against the first {first} could not decide ({ends.why})"

    @property
    def candidates(self) -> list[str]:
        """The values the first bad one is among: one when found; the skipped ones before the
        bad end and it, when only skipped values were left; none when the search stopped."""
        if self.bad is None or self.stopped or not self.done:
            return []
        return self.values[self.good + 1:self.bad + 1]

    @property
    def bracket(self) -> Optional[str]:
        """What the probes so far decided, in words (None before the ends were found a regression)."""
        if self.bad is None:
            return None
        return f"it lies after {self.values[self.good]}, at or before {self.values[self.bad]}"

    @property
    def first_bad(self) -> Optional[str]:
        found = self.candidates
        return found[0] if len(found) == 1 else None
