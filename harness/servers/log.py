"""A server's log file, written line by line through the redaction policy, so that what a
server prints (its own `--api-key`, an `HF_TOKEN=...` line) is never on disk unscrubbed,
not even after a `kill -9` of the harness. The file is readable by its owner only."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Iterable

from harness.record.secrets import Redactor

Scrub = Callable[[str], str]
PATTERNS_ONLY: Scrub = Redactor().text  # when no record supplied the values it learned


class ServerLog:
    def __init__(self, path: Path, scrub: Scrub | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.scrub = scrub or PATTERNS_ONLY
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.chmod(self.path, 0o600)
        self.file = os.fdopen(fd, "ab")
        self.pending = b""
        self.lock = threading.Lock()

    def write(self, chunk: bytes) -> None:
        with self.lock:
            self.pending += chunk
            *lines, self.pending = self.pending.split(b"\n")
            for line in lines:
                self.file.write(self.scrub(line.decode(errors="replace")).encode() + b"\n")
            self.file.flush()

    def close(self) -> None:
        with self.lock:
            if self.pending:
                self.file.write(self.scrub(self.pending.decode(errors="replace")).encode())
                self.pending = b""
            self.file.close()

    def follow(self, chunks: Iterable[bytes], name: str) -> threading.Thread:
        """Copy a stream of output chunks into the log from a daemon thread (it ends with
        the stream; the log is closed then)."""
        def copy() -> None:
            try:
                for chunk in chunks:
                    self.write(chunk)
            except Exception:  # noqa: BLE001 - the stream is gone (a closed pipe, a removed container); what was copied stays
                pass
            finally:
                self.close()

        thread = threading.Thread(target=copy, name=name, daemon=True)
        thread.start()
        return thread
