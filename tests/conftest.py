"""What every test area shares: the running test, told to the whole-run helper
(tests/support/runs.py) so that it can refuse to start a run under an unmarked test."""

from __future__ import annotations

import pytest

from tests.support import runs


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the fixtures: a module-scoped fixture that starts a run is set up here, in its first test.
    runs.current_test = item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    runs.current_test = None
