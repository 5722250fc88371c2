"""Every HTML page specgate writes, one way: its template in harness/report/templates/ (each
extends base.html.j2, the head every page shares) rendered autoescaped and strict, then written
atomically through the record's atomic write. A record kind's page (run, sweep, capacity, A/B,
calibration) and the history page differ only in their template and its context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from harness.record.atomic import atomic_write

TEMPLATES = Path(__file__).resolve().parent / "templates"


class ReportError(Exception):
    """The record cannot be rendered (not a record, unwritable output): one sentence."""


def render(template: str, context: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(template).render(**context)


def write_page(out: Path, html: str, what: str = "the report") -> Path:
    """`html` written atomically at `out`; a ReportError of one sentence when it cannot be."""
    try:
        atomic_write(Path(out), html)
    except OSError as exc:
        raise ReportError(f"cannot write {what} to {out} ({exc.strerror or exc}).") from None
    return Path(out)
