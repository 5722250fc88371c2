"""Fixtures of the load tests: servers that misbehave on purpose, started in this process."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
def fake_openai():
    """``fake_openai(mode, **options)`` starts a :class:`FakeOpenAI`; all are closed at the test's end."""
    started: list[FakeOpenAI] = []

    def start(mode: str = "ok", **options: Any) -> FakeOpenAI:
        fake = FakeOpenAI(mode, **options).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.close()
