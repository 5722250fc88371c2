"""The one shape of every driver command: compose -> plan -> measure -> record, and the record's
kind carries its page (harness/record/kinds.py: `specgate report DIR` writes it).

    compose(tokens, conf_dir)  the command line composed and checked: everything a user can
                               get wrong, before anything starts or is written (ConfigError, exit 4)
    plan(composed, command)    what to measure, and the record of the driver's `kind` opened
    measure(plan, interrupts)  the servers, loads or points; Ctrl-C and SIGTERM raise
                               KeyboardInterrupt in here (harness/interrupts.py), for every driver
    record(plan)               the verdicts judged and the record closed: the exit status
    interrupted(plan)          the record closed as interrupted: the exit status (2)

`specgate sweep`, `capacity`, `ab` and `calibrate` are Drivers, and harness/cli.py runs each the
same way, `main(tokens, conf_dir, command)`. A run follows the shape inside pytest (the plugin
composes, harness/run/runner.py measures, the run record's kind has its page), so its command
hands the tokens to pytest through the same entry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from harness.config.compose import PYTEST_VALUE_OPTIONS, is_override
from harness.interrupts import Interrupts
from harness.record.kinds import RecordKind

STEPS = ("compose", "plan", "measure", "record", "interrupted")


def split_tokens(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra overrides, pytest options), each in command-line order."""
    overrides, options = [], []
    for prev, token in zip([None, *tokens], tokens):
        (overrides if is_override(token, prev, PYTEST_VALUE_OPTIONS) else options).append(token)
    return overrides, options


class Driver(ABC):
    """A driver command (see the module's docstring)."""

    command: ClassVar[str]  # its subcommand: specgate <command>
    kind: ClassVar[RecordKind]  # the record it writes, which carries its page

    def main(self, tokens: list[str], conf_dir: Path, command: list[str]) -> int:
        """The command line's tokens to an exit status; a ConfigError before anything starts."""
        return self.drive(self.compose(tokens, Path(conf_dir).resolve()), command)

    def drive(self, composed: Any, command: list[str]) -> int:
        plan = self.plan(composed, command)
        interrupts = Interrupts()
        try:
            with interrupts.installed():  # Ctrl-C (also when inherited ignored) and SIGTERM unwind
                self.measure(plan, interrupts)
        except KeyboardInterrupt:
            return self.interrupted(plan)
        return self.record(plan)

    @abstractmethod
    def compose(self, tokens: list[str], conf_dir: Path) -> Any:
        """The tokens composed and checked, before anything starts."""

    @abstractmethod
    def plan(self, composed: Any, command: list[str]) -> Any:
        """What to measure, with the record of `kind` opened."""

    @abstractmethod
    def measure(self, plan: Any, interrupts: Interrupts) -> None:
        """Measure; KeyboardInterrupt when Ctrl-C or SIGTERM stops it."""

    @abstractmethod
    def record(self, plan: Any) -> int:
        """Judge and close the record; the exit status."""

    @abstractmethod
    def interrupted(self, plan: Any) -> int:
        """Close the record as interrupted; the exit status (INTERRUPTED, unless a point said otherwise)."""
