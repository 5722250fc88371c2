"""``workload.dataset``: a local file of prompts, read into :class:`Conversation` rows.

The format is told by the content, not the file's name:

* **JSON Lines** -- one JSON object a line (blank lines are skipped);
* **a JSON array** of the same objects, or of ShareGPT records.

A row gives its prompt in one of four fields:

* ``prompt``: a string, one turn;
* ``turns``: a list of user turns (MT-Bench, Spec-Bench), sent in order in one conversation;
* ``messages``: an OpenAI chat list of ``{role, content}``: one request as written.  Its
  last user message is the turn; the messages before it (a system prompt, an earlier
  exchange) are sent as they are; assistant messages after it (a reference answer) are not;
* ``conversations``: ShareGPT's ``[{from: human|gpt|system, value}]``: the human turns
  are the turns (the server's own answers replace the recorded gpt ones), a system
  message is the context.

and may carry ``category`` (a non-empty string, recorded with each of its requests) and
``max_tokens`` (a positive integer that replaces ``workload.max_tokens`` for that row).

Anything else stops the run before any server starts: :class:`DatasetError` says in one
sentence which file and which line.  Loads are cached by path, size and modification
time, since config validation and each arm's load read the same file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

from harness import project_path
from harness.load.conversation import Conversation, Message
from harness.limits import MAX_OUTPUT_TOKENS

PROMPT_FIELDS = ('"prompt" (a string), "turns" (a list of strings), "messages" (an OpenAI chat list) '
                 'or "conversations" (ShareGPT)')
SHAREGPT_HUMAN = ("human", "user")
SHAREGPT_ANSWER = ("gpt", "assistant", "chatgpt", "bard", "bing")
_SPACE = re.compile(r"\s*")


class DatasetError(ValueError):
    """A dataset that cannot be read, or a row that is not one of the formats (one sentence)."""


def load_dataset(value: str | os.PathLike, key: str = "workload.dataset") -> tuple[Conversation, ...]:
    """Every row of the dataset ``value`` names, in file order; ``key`` is the config key that
    named it, for the sentence of a bad file (workload.trace_content reads datasets too)."""
    path, stat = workload_file(key, value, DatasetError)
    return _load(path, stat.st_mtime_ns, stat.st_size, key)


def workload_file(key: str, value: str | os.PathLike, error: type[ValueError]) -> tuple[Path, os.stat_result]:
    """The file a workload key (`workload.dataset`, `workload.trace`) names, relative paths the
    project's, and its stat (what keys a cached read); ``error`` with one sentence when it is
    missing, unreadable or not a file."""
    path = project_path(value)
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise error(f"{key}={value}: no such file ({path})") from None
    except OSError as exc:
        raise error(f"{key}={value}: cannot read {path} ({exc.strerror})") from None
    if not path.is_file():
        raise error(f"{key}={value}: {path} is not a file")
    return path, stat


def dataset_digest(value: str | os.PathLike) -> str | None:
    """The sha256 of the dataset file's bytes (None when it cannot be read): what identifies
    the prompts a run sent, so an edited file at the same path is a different workload."""
    return file_digest(value)


def file_digest(value: str | os.PathLike) -> str | None:
    """The sha256 of a workload file's bytes (None when it cannot be read), cached while the
    file is unchanged."""
    path = project_path(value)
    try:
        stat = path.stat()
    except OSError:
        return None
    return _digest(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _digest(path: Path, mtime_ns: int, size: int) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int, size: int, key: str) -> tuple[Conversation, ...]:
    """The rows of ``path`` as it was at ``mtime_ns`` and ``size`` (the cache key)."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first row
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{key} {path}: not UTF-8 text (byte {exc.start})") from None
    items = _array_items(path, text, key) if text.lstrip().startswith("[") else _lines(path, text, key)
    rows = tuple(_row(obj, index, f"{key} {path}, line {line}") for index, (obj, line) in enumerate(items))
    if not rows:
        raise DatasetError(f"{key} {path} has no rows")
    return rows


# --- the two layouts: (object, line number) of each row -------------------------------------


def _lines(path: Path, text: str, key: str) -> Iterator[tuple[Any, int]]:
    # JSON Lines ends a row at "\n" only: str.splitlines() would also split inside a string
    # holding U+2028, U+0085 or a form feed, which JSON allows unescaped
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line), number
        except json.JSONDecodeError as exc:
            raise _bad_json(path, number, exc, key) from None


def _array_items(path: Path, text: str, key: str) -> Iterator[tuple[Any, int]]:
    """The items of a JSON array one at a time, each with the line it starts on (a
    ShareGPT file is one long array: a row's error should still name its line)."""
    decoder = json.JSONDecoder()
    pos = _SPACE.match(text, text.index("[") + 1).end()
    line, counted = 1, 0
    try:
        if text.startswith("]", pos):
            pos += 1
        else:
            while True:
                line, counted = line + text.count("\n", counted, pos), pos
                obj, pos = decoder.raw_decode(text, pos)
                yield obj, line
                pos = _SPACE.match(text, pos).end()
                if text.startswith("]", pos):
                    pos += 1
                    break
                if not text.startswith(",", pos):
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
                pos = _SPACE.match(text, pos + 1).end()
        pos = _SPACE.match(text, pos).end()
        if pos < len(text):
            raise json.JSONDecodeError("Extra data", text, pos)
    except json.JSONDecodeError as exc:
        raise _bad_json(path, exc.lineno, exc, key) from None


def _bad_json(path: Path, line: int, exc: json.JSONDecodeError, key: str) -> DatasetError:
    # json's messages may end in "at" ("Unterminated string starting at"): the column says where
    return DatasetError(f"{key} {path}, line {line}: not valid JSON at column {exc.colno}: "
                        f"{exc.msg.removesuffix(' at')}")


# --- one row --------------------------------------------------------------------------------


def _row(obj: Any, index: int, where: str) -> Conversation:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: a row must be a JSON object, got {type(obj).__name__}")
    context, turns = _prompt(obj, where)
    return Conversation(turns=turns, context=context, category=_category(obj, where),
                        max_tokens=_max_tokens(obj, where), row=index)


def _prompt(obj: dict, where: str) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    """(context, turns) from whichever prompt field the row has."""
    if "prompt" in obj:
        return (), (_text(obj["prompt"], '"prompt"', where),)
    if "turns" in obj:
        return (), _turns(obj["turns"], where)
    if "messages" in obj:
        return _messages(obj["messages"], where)
    if "conversations" in obj:
        return _sharegpt(obj["conversations"], where)
    raise DatasetError(f"{where}: the row has no usable prompt field; give {PROMPT_FIELDS}")


def _text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: {name} must be a non-empty string, got {json.dumps(value)[:60]}")
    return value


def _turns(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise DatasetError(f'{where}: "turns" must be a non-empty list of strings, got {json.dumps(value)[:60]}')
    return tuple(_text(turn, f'"turns"[{i}]', where) for i, turn in enumerate(value))


def _messages(value: Any, where: str) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    if not isinstance(value, list):
        raise DatasetError(f'{where}: "messages" must be a list of {{role, content}}, got {json.dumps(value)[:60]}')
    messages = []
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise DatasetError(f'{where}: "messages"[{i}] must be {{"role": "...", "content": "..."}} with string '
                               f"content, got {json.dumps(m)[:60]}")
        messages.append(Message(m["role"], m["content"]))
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last_user is None:
        raise DatasetError(f'{where}: "messages" has no user message to send')
    return tuple(messages[:last_user]), (_text(messages[last_user].content, f'"messages"[{last_user}].content', where),)


def _sharegpt(value: Any, where: str) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    if not isinstance(value, list):
        raise DatasetError(f'{where}: "conversations" must be a list of {{from, value}}, got {json.dumps(value)[:60]}')
    context, turns = [], []
    for i, m in enumerate(value):
        speaker = m.get("from") if isinstance(m, dict) else None
        if not isinstance(m, dict) or not isinstance(m.get("value"), str) or speaker not in (
                *SHAREGPT_HUMAN, *SHAREGPT_ANSWER, "system"):
            raise DatasetError(f'{where}: "conversations"[{i}] must be {{"from": "human"|"gpt"|"system", '
                               f'"value": "..."}}, got {json.dumps(m)[:60]}')
        if speaker == "system" and not turns:
            context.append(Message("system", m["value"]))
        elif speaker in SHAREGPT_HUMAN:
            turns.append(_text(m["value"], f'"conversations"[{i}].value', where))
    if not turns:
        raise DatasetError(f'{where}: "conversations" has no human turn to send')
    return tuple(context), tuple(turns)


def _category(obj: dict, where: str) -> str | None:
    value = obj.get("category")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f'{where}: "category" must be a non-empty string, got {json.dumps(value)[:60]}')
    return value


def _max_tokens(obj: dict, where: str) -> int | None:
    value = obj.get("max_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DatasetError(f'{where}: "max_tokens" must be a positive integer, got {json.dumps(value)[:60]}')
    if value > MAX_OUTPUT_TOKENS:
        raise DatasetError(f'{where}: "max_tokens" {value} is more than one request may have ({MAX_OUTPUT_TOKENS})')
    return value
