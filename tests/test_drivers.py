"""Every driver command has one shape (harness/run/driver.py: compose -> plan -> measure ->
record, or interrupted), harness/cli.py runs each through one table the same way, every record
kind carries its page, and every page extends the one shared head (templates/base.html.j2)."""

from __future__ import annotations

import inspect
import os
import re
import signal
from pathlib import Path

import pytest

from harness import cli
from harness.record.kinds import KINDS
from harness.report.page import TEMPLATES
from harness.run.driver import STEPS, Driver


def test_every_driver_command_is_a_driver_with_every_step_and_its_record_kind():
    drivers = cli.drivers()
    assert set(drivers) == set(cli.DRIVER_COMMANDS) == {"run", "sweep", "capacity", "ab", "calibrate", "bisect"}
    for name, driver in drivers.items():
        assert driver.command == name and driver.kind in KINDS.values(), name
        if name == "run":  # the run's shape is inside pytest: only the entry is a driver's
            assert inspect.signature(driver.main) == inspect.signature(Driver.main)
            continue
        assert issubclass(driver, Driver) and not inspect.isabstract(driver), name
        assert all(getattr(driver, step) is not getattr(Driver, step) for step in STEPS), name
    assert {d.kind.name for d in drivers.values()} == set(KINDS)  # every kind is some driver's


def test_cli_runs_every_driver_command_through_the_one_table(monkeypatch):
    seen = []

    class Recorded:
        def __init__(self, name):
            self.name = name

        def __call__(self):
            return self

        def main(self, tokens, conf_dir, command):
            seen.append((self.name, tokens, command))
            return 7

    monkeypatch.setattr(cli, "drivers", lambda: {name: Recorded(name) for name in cli.DRIVER_COMMANDS})
    for name in cli.DRIVER_COMMANDS:
        assert cli.main([name, "+exp=sim_smoke", "x=1"]) == 7
    assert seen == [(name, ["+exp=sim_smoke", "x=1"], ["specgate", name, "+exp=sim_smoke", "x=1"])
                    for name in cli.DRIVER_COMMANDS]


class Steps(Driver):
    """A driver that says which steps ran; `stop_in` raises the signal there."""

    command, kind = "steps", KINDS["run"]

    def __init__(self, stop_in: str | None = None):
        self.ran, self.stop_in = [], stop_in

    def step(self, name):
        self.ran.append(name)
        if name == self.stop_in:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill` would: the shape's Interrupts raise it
        return name

    def compose(self, tokens, conf_dir):
        return self.step("compose")

    def plan(self, composed, command):
        return self.step("plan")

    def measure(self, plan, interrupts):
        self.step("measure")

    def record(self, plan):
        self.step("record")
        return 0

    def interrupted(self, plan):
        self.step("interrupted")
        return 2


def test_the_shape_runs_its_steps_in_order_and_a_signal_ends_in_interrupted():
    before = signal.getsignal(signal.SIGTERM)
    driver = Steps()
    assert driver.main([], Path("."), []) == 0
    assert driver.ran == ["compose", "plan", "measure", "record"]
    stopped = Steps(stop_in="measure")
    assert stopped.main([], Path("."), []) == 2
    assert stopped.ran == ["compose", "plan", "measure", "interrupted"]
    assert signal.getsignal(signal.SIGTERM) == before  # put back as it was


def test_a_mistake_in_compose_starts_nothing():
    class Refuses(Steps):
        def compose(self, tokens, conf_dir):
            raise ValueError("one sentence")

    driver = Refuses()
    with pytest.raises(ValueError):
        driver.main([], Path("."), [])
    assert driver.ran == []


def test_every_record_kind_carries_its_page():
    for kind in KINDS.values():
        module, function = kind.page.split(":")
        writer = getattr(__import__(module, fromlist=[function]), function)
        assert len(inspect.signature(writer).parameters) == 2, kind.name  # (folder, out)
    assert len({kind.page for kind in KINDS.values()}) == len(KINDS)


def test_every_page_extends_the_one_shared_head():
    pages = sorted(p for p in TEMPLATES.glob("*.html.j2") if p.name != "base.html.j2")
    assert len(pages) >= 6  # run, sweep, capacity, ab, calibration, history
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert text.startswith('{% extends "base.html.j2" %}'), page.name
        assert not re.search(r"<(head|html|body|main|meta)\b", text), page.name  # the head is the base's


def test_the_cli_has_no_table_of_page_writers():
    source = inspect.getsource(cli.cmd_report)
    assert "write_page" in source and "writers" not in source
