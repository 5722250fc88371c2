"""What specgate writes carries secrets only as fingerprints; text it did not write is scrubbed.

Secrets are a type decided by location when the config is composed
(harness/secrets.py): compose() puts each one's fingerprint (``secret:<16 hex>``) in the
config, so records, summaries, the terminal and launchers' command lines written from it
never hold the value, and nothing that is not a secret is changed.

What specgate does not write itself -- a server's log, a server's error body, a process's
command line or environment read back, a tool's traceback, Hydra's and the launchers' own
files and logs -- goes through the :class:`Redactor` on its way out:
- every secret this process knows (the :data:`~harness.secrets.BOOK`, and this
  process's secret-named environment variables) in every form text gives it (as typed,
  shell- and Hydra-escaped, JSON-quoted, URL-encoded), and `NAME=value` of a secret
  variable, become its fingerprint; a value shorter than :data:`WORD_BOUNDED_BELOW` only
  as a whole word, one shorter than :data:`MIN_FREE_TEXT` not at all (where it sits in the
  config it is fingerprinted whatever its length). A secret that equals a value the record
  shows anyway (an arm's name, the model path) is left where that value stands, and one that
  is a word specgate writes itself (`passed`, `throughput`) is not hunted as a bare word;
- the shapes of a secret: a URL's userinfo (the user alone too), secret-named query
  parameters, credential headers, the values after a secret-named flag, secret-named
  assignments, values under a secret-named key or an environment mapping's unreadable name.
"""

from __future__ import annotations

import os
import re
import weakref
from typing import Any, Iterable

from harness.secrets import (BOOK, ENV_KEYS, FINGERPRINT, READABLE_ENV, Policy, SecretBook, encodings,
                                    fingerprint, is_flag, masked_override, override_secrets, secret_name)

REDACTED = "***"  # how records made before fingerprints hid a secret: unknown, never compared
MIN_FREE_TEXT = 3  # shorter secrets are not hunted in free text: they would match every word
WORD_BOUNDED_BELOW = 8  # shorter ones only as whole words ("abc" never inside "abcdef")

URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)([^/\s@?#\"'<>]+)(@)")
QUERY_PARAM = re.compile(r"([?&;]([^=&;\s#]+)=)([^&;\s#\"'<>]+)")
HEADER = re.compile(r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|cookie)(\"?\s*[:=]\s*\"?)"
                    r"((?:bearer|basic|token)\s+)?([^\s,\"';]+)")
# a flag starts a word: "generation-token counters" is prose, not a flag `-token`
FLAG_EQUALS = re.compile(r"(?<![\w.-])(--?[A-Za-z][\w.-]*)=(\S+)")
FLAG_SPACE = re.compile(r"(?<![\w.-])(--?[A-Za-z][\w.-]*)((?:[ \t]+(?!-)\S+)+)")  # a flag and every value up to the next flag
ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)(=)([^\s&;,\"'}]+)")  # NAME=value
QUOTED_ENTRY = re.compile(r"([\"'])([A-Za-z_][\w.-]*)\1(\s*:\s*)([\"']?)([^\"',}\s]+)")  # "name": "value" (JSON, a repr)
PATTERN_CHARS = frozenset("=:-@")  # every pattern needs one of these: most of a request's text skips them all


def readable_patterns(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The allow-list: the general one, each engine's own tuning variables, `record.readable_env`."""
    from harness.engines import ENGINES  # the engines own their names (tests/engines/test_engines.py)
    return READABLE_ENV + tuple(p for engine in ENGINES.values() for p in engine.readable_env) + tuple(extra)


def deny_flags_policy(extra_env: Iterable[str] = (), book: SecretBook = BOOK) -> Policy:
    """For text whose engine is unknown (a command line as typed): no flag's value is readable."""
    return Policy(readable_env=readable_patterns(extra_env), book=book)


def readable_env(name: Any, extra: Iterable[str] = ()) -> bool:
    return deny_flags_policy(extra).env_readable(name)


def already(value: str) -> bool:
    return bool(FINGERPRINT.fullmatch(value.strip("\"'")))


NOT_A_CREDENTIAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|none|null|true|false|\*+", re.IGNORECASE)


def mark(value: str) -> str:
    """A value found in free text by a secret's shape, as its fingerprint (entered in the
    book, so its other occurrences go too); a number or null after a secret-like name is a
    count (`compute_knee_tokens=None`, `max_tokens: 16`), not a credential."""
    bare = value.strip("\"'")
    if already(bare) or NOT_A_CREDENTIAL.fullmatch(bare.rstrip(",;)")):
        return value
    return value.replace(bare, BOOK.hide(bare, "found in text"))


class Redactor:
    """The way out for what specgate did not write itself: data read back from servers and
    processes, and free text."""

    def __init__(self, secret_values: Iterable[str] | None = None, readable: Iterable[str] = (),
                 book: SecretBook = BOOK):
        self.book = book
        self.readable = tuple(readable)  # record.readable_env: more environment variables users may read
        self.policy = deny_flags_policy(self.readable, book)
        self.remember(secret_values or ())

    def remember(self, values: Iterable[Any]) -> None:
        for value in values:
            if isinstance(value, str) and value and not already(value):
                self.book.hide(value, "given")

    def learn(self, data: Any) -> None:
        """Enter the secrets `data` holds by where they sit: a config (a plain container),
        overrides as typed (strings), and this process's secret-named environment variables."""
        if isinstance(data, (list, tuple)) and all(isinstance(item, str) for item in data):
            for item in data:
                override_secrets(item, self.policy)
        elif isinstance(data, str):
            override_secrets(data, self.policy)
        else:
            self.policy.mask(data)
        self.remember(v for k, v in os.environ.items() if secret_name(k) and len(v) >= MIN_FREE_TEXT)

    # --- data read back (results, request lines) ------------------------------------------
    def data(self, data: Any, key: Any = None) -> Any:
        """``data`` with every secret as its fingerprint; ``key``: the key it sits under."""
        if isinstance(data, dict):
            in_env = key in ENV_KEYS
            return {k: (self.hidden(v) if self.secret_at(k, v, in_env) else self.data(v, k)) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            if all(isinstance(item, (int, float)) for item in data):
                return list(data)  # numbers hide nothing: a request's chunk times and token ids pass at C speed
            out, hiding = [], False
            for item in data:
                if isinstance(item, str) and is_flag(item):
                    out.append(self.data(item))
                    hiding = "=" not in item and secret_name(item)
                else:
                    out.append(self.hidden(item) if hiding and isinstance(item, str) else self.data(item))
            return out
        if isinstance(data, str):
            return self.text(data)
        return data

    def secret_at(self, key: Any, value: Any, in_env: bool) -> bool:
        if not isinstance(value, str) or value == "":
            return False  # a number under `future_key` or `*_tokens` is a count, never a credential
        return secret_name(key) or (in_env and not self.policy.env_readable(key))

    def hidden(self, value: Any) -> str:
        """A value read back under a secret location (a process's HOME, a server's api_key):
        its fingerprint, not entered in the book (a process's every variable would then be
        hunted in all text)."""
        text = str(value)
        return text if already(text) else fingerprint(value)

    # --- free text -----------------------------------------------------------------------
    def text(self, text: str) -> str:
        """`text` with every secret of the book, and every secret's shape, as a fingerprint.
        Remembered per book while the book stays as it is: a run writes its results.json
        after every test, the same strings each time."""
        if not isinstance(text, str) or not text:
            return text
        if len(text) > SCRUBBED_LONGEST:
            return self.scrub(text)  # a log or a page: read once
        state = book_state(self.book)
        state_then, scrubbed = _SCRUBBED.get(self.book, (None, {}))
        if state_then != state:
            scrubbed = {}
            _SCRUBBED[self.book] = (state, scrubbed)
        if text not in scrubbed:
            if len(scrubbed) >= SCRUBBED_KEPT:
                scrubbed.clear()
            scrubbed[text] = self.scrub(text)
        return scrubbed[text]

    def scrub(self, text: str) -> str:
        text = self.scrub_values(text)
        if not PATTERN_CHARS.intersection(text):
            return text
        return self.scrub_shapes(text)

    def scrub_values(self, text: str) -> str:
        pattern, shields, form_value = self.compiled()
        if pattern is None:
            return text

        def replace(match: re.Match) -> str:
            value = form_value[match.group(0)]
            for public in shields.get(value, ()):
                for found in re.finditer(re.escape(public), text):
                    if found.start() <= match.start() and match.end() <= found.end():
                        return match.group(0)  # it stands inside a value the record shows anyway
            return fingerprint(value)

        return pattern.sub(replace, text)

    def compiled(self) -> tuple[Any, dict[str, list[str]], dict[str, str]]:
        """One alternation of every form of every secret (longest first), rebuilt when the
        book grows (kept per book: every Redactor of the process shares it); for each value,
        the public values it stands inside; and which value each form is."""
        state = book_state(self.book)
        cached = _COMPILED.get(self.book)
        if cached is not None and cached[0] == state:
            return cached[1]
        form_value: dict[str, str] = {}
        values = self.book.values()
        own_words = vocabulary() if values else set()  # read only when there is a secret to hunt
        for value in values:
            if len(value) < MIN_FREE_TEXT or value in own_words:
                continue
            for form in encodings(value):
                form_value.setdefault(form, value)
        parts = []
        for form in sorted(form_value, key=len, reverse=True):
            escaped = re.escape(form)
            parts.append(escaped if len(form) >= WORD_BOUNDED_BELOW else rf"(?<![\w]){escaped}(?![\w])")
        pattern = re.compile("|".join(parts)) if parts else None
        shields = {value: [p for p in self.book.public if value in p] for value in set(form_value.values())}
        _COMPILED[self.book] = (state, (pattern, shields, form_value))
        return pattern, shields, form_value

    def scrub_shapes(self, text: str) -> str:
        text = URL_USERINFO.sub(lambda m: m.group(1) + mark(m.group(2)) + m.group(3), text)
        text = QUERY_PARAM.sub(lambda m: m.group(1) + mark(m.group(3)) if secret_name(m.group(2)) else m.group(0), text)
        text = HEADER.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) or "") + mark(m.group(4)), text)
        text = FLAG_EQUALS.sub(lambda m: f"{m.group(1)}={mark(m.group(2))}" if secret_name(m.group(1)) else m.group(0),
                               text)
        text = FLAG_SPACE.sub(lambda m: m.group(1) + re.sub(r"\S+", lambda v: mark(v.group(0)), m.group(2))
                              if secret_name(m.group(1)) else m.group(0), text)
        names = self.book.env_names
        text = ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + mark(m.group(3))
                              if (secret_name(m.group(1)) or m.group(1) in names) else m.group(0), text)
        return QUOTED_ENTRY.sub(lambda m: "".join(m.group(1, 2, 1, 3, 4)) + mark(m.group(5))
                                if (secret_name(m.group(2)) or m.group(2) in names) else m.group(0), text)

    def override_label(self, override: str) -> str:
        """An override as a folder name or a terminal line may show it."""
        return masked_override(override, self.policy)


# per book, gone with it (a test's own book must not leave its pattern to the next)
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # book -> (its size, its pattern)
_SCRUBBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # book -> (its size, text -> scrubbed)
SCRUBBED_KEPT = 50_000  # texts remembered per book, at most
SCRUBBED_LONGEST = 4096  # a longer text is not remembered
_VOCABULARY: set[str] = set()


def book_state(book: SecretBook) -> tuple[int, int, int]:
    """What a cached pattern or scrubbed text depends on; the book only grows, so its sizes say
    whether it changed."""
    return len(book.by_fingerprint), len(book.public), len(book.env_names)


def vocabulary() -> set[str]:
    """The words specgate writes itself (every word of every string in harness/: verdicts,
    headings, metric names). A secret that is one of them (`APP_MODE=passed`) is fingerprinted
    where it sits and beside its name, but not hunted as a bare word: that would blank the
    record's own sentences."""
    if not _VOCABULARY:
        import ast
        from pathlib import Path

        for path in Path(__file__).resolve().parents[1].rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    _VOCABULARY.update(re.findall(r"[A-Za-z][A-Za-z0-9_]+", node.value))
    return _VOCABULARY


def terminal_text(text: str, argv: list[str]) -> str:
    """A message for the terminal, with every secret the command line holds as its
    fingerprint (a Hydra parse error quotes the override it could not parse, as typed)."""
    redactor = Redactor()
    redactor.learn([a for a in argv if isinstance(a, str)])
    return redactor.text(text)
