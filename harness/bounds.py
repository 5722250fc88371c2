"""Where a number of the config may lie: the ``Bounds`` a schema field carries (``bounded(...)``),
checked at compose time by harness/config/numbers.py. Imports nothing of the project, so every
options dataclass (the schema's, each engine's own in harness/engines) can bound its numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

INT64_MAX = 2**63 - 1  # what a Parquet column, numpy and every engine's int can hold


@dataclass(frozen=True)
class Bounds:
    """Where a number of the config may lie (checked at compose time, harness/config/numbers.py):
    ``low``/``high`` inclusive, ``above``/``below`` exclusive; ``example`` shows a good value."""

    low: Optional[float] = None
    high: Optional[float] = None
    above: Optional[float] = None
    below: Optional[float] = None
    example: str = ""

    def holds(self, value: float) -> bool:
        return ((self.low is None or value >= self.low) and (self.high is None or value <= self.high)
                and (self.above is None or value > self.above) and (self.below is None or value < self.below))

    def describe(self) -> str:
        parts = [f">= {self.low:g}" if self.low is not None else "", f"> {self.above:g}" if self.above is not None else "",
                 f"<= {self.high:g}" if self.high is not None else "", f"< {self.below:g}" if self.below is not None else ""]
        text = " ".join(["a finite number", " and ".join(p for p in parts if p)]).strip()
        return text + (f" (e.g. {self.example})" if self.example else "")


def bounded(default: Any = None, *, factory: Any = None, **bounds: Any) -> Any:
    """A dataclass field whose numbers (its own, or each value of a dict/list) must lie within bounds."""
    metadata = {"bounds": Bounds(**bounds)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def free_form(factory: Any = dict) -> Any:
    """A field of free-form values passed on as they are (an engine's own JSON config): its
    numbers are another program's to judge; only NaN and infinity are refused here."""
    return field(default_factory=factory, metadata={"free_form": True})
