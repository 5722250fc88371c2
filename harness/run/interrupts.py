"""Ctrl-C and SIGTERM for every driver, in one place: `specgate ab`, `calibrate`, `capacity` and
`sweep` install :class:`Interrupts` around their work, so either signal unwinds as
KeyboardInterrupt (servers stopped, the record closed as interrupted, exit 2) — also when the
process was started with SIGINT ignored, as a shell's background job or a script's child
inherits it (Python then leaves Ctrl-C ignored unless a handler is installed). The children a
driver starts meanwhile (each run's pytest) get the default back: a Python handler is reset on
exec, an ignored signal is not. A second Ctrl-C while servers stop is ignored (:func:`sigint_ignored`).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Ctrl-C and SIGTERM as KeyboardInterrupt, remembered: a signal that lands while the
    interpreter swallows exceptions (a fork's handlers, as a server process starts) is not
    lost, but raised again at the next step (`check`)."""

    def __init__(self):
        self.seen: int | None = None

    def handle(self, signum, frame):
        self.seen = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def check(self) -> None:
        if self.seen is not None:
            raise KeyboardInterrupt(f"signal {self.seen}")

    @contextmanager
    def installed(self) -> Iterator["Interrupts"]:
        previous = {sig: signal.signal(sig, self.handle) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ctrl-C ignored while it lasts (a server's stop that a second Ctrl-C must not cut short)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to guard
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
