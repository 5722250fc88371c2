"""Atomic file writes: a temp file in the same folder, then a rename, so a crash or a
Ctrl-C never leaves half a file (the one helper every writer of the run record uses)."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """`with atomic_file(p, "wb") as f: ...`: `p` appears whole when the block ends, or
    not at all if it raises. The file is private to its owner (0600), like every record file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike, text: str) -> None:
    with atomic_file(path, "w", encoding="utf-8") as handle:
        handle.write(text)
