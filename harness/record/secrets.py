"""One redaction policy for everything specgate writes: records, server logs (as they are
written), the summary and step summary, JUnit properties and failure messages.

A value is a secret when it sits
- under a secret-named key (`HF_TOKEN`, `api_key`, `AWS_SECRET_ACCESS_KEY`, `auth`);
- after a secret-named flag, as `--api-key VALUE` or `--hf-token=VALUE`;
- in a URL's userinfo (`http://admin:PASSWORD@host`) or a secret-named query parameter
  (`?api_key=VALUE`, `&token=VALUE`);
- in an HTTP header that carries credentials (`Authorization: Bearer VALUE`, `X-API-Key: VALUE`);
- or anywhere else in text, once learned from one of the above (a server echoing its
  own `--api-key` in a log line).
Nothing else is redacted: `max_tokens`, `--sim-prefill-ms-per-token` and token counts are
numbers, not secrets.
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "***"
MIN_SECRET_LENGTH = 6  # shorter learned values would scrub ordinary words and numbers from logs

# A name (normalized: lower case, runs of non-alphanumerics as "_") is secret-like when its
# last word(s) are one of these; "per_token" (a rate, as in ms per token) is not.
SECRET_WORDS = (r"api_?key|access_?key|private_?key|secret(_access)?(_key)?|key|token|password|passwd|"
                r"credentials?|auth|authorization|bearer|cookie")
SECRET_NAME = re.compile(rf"(^|_)({SECRET_WORDS})$")
NOT_SECRET_NAME = re.compile(r"(^|_)per_token$")

URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)([^@\s/]+)(@)")
QUERY_PARAM = re.compile(r"([?&;]([^=&;\s#]+)=)([^&;\s#\"'<>]+)")
HEADER = re.compile(r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|cookie)(\"?\s*[:=]\s*\"?)"
                    r"((?:bearer|basic|token)\s+)?([^\s,\"';]+)")
FLAG_EQUALS = re.compile(r"(--?[A-Za-z][\w.-]*)=(\S+)")
FLAG_SPACE = re.compile(r"(--?[A-Za-z][\w.-]*)([ \t]+)(?!-)(\S+)")
ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=([^\s&;]+)")
# URL userinfo needs ':', a query parameter and an assignment '=', a header ':' or '=', a flag '-'
PATTERN_CHARS = frozenset("=:-")


def secret_name(name: Any) -> bool:
    normalized = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
    return bool(SECRET_NAME.search(normalized)) and not NOT_SECRET_NAME.search(normalized)


def secrets_in_text(text: str) -> set[str]:
    """The secret values the patterns find in `text` (flags, URLs, headers, assignments)."""
    found = {m.group(2) for m in URL_USERINFO.finditer(text)}
    found |= {m.group(3) for m in QUERY_PARAM.finditer(text) if secret_name(m.group(2))}
    found |= {m.group(4) for m in HEADER.finditer(text)}
    found |= {m.group(2) for m in FLAG_EQUALS.finditer(text) if secret_name(m.group(1))}
    found |= {m.group(3) for m in FLAG_SPACE.finditer(text) if secret_name(m.group(1))}
    found |= {m.group(2) for m in ASSIGNMENT.finditer(text) if secret_name(m.group(1))}
    return {v.strip("\"'") for v in found if v.strip("\"'") and v.strip("\"'") != REDACTED}


def redact_patterns(text: str) -> str:
    if not PATTERN_CHARS.intersection(text):
        return text  # every pattern needs one of these: a request's tokens and texts mostly skip all six
    text = URL_USERINFO.sub(rf"\1{REDACTED}\3", text)
    text = QUERY_PARAM.sub(lambda m: m.group(1) + REDACTED if secret_name(m.group(2)) else m.group(0), text)
    text = HEADER.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) or "") + REDACTED, text)
    text = FLAG_EQUALS.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1)) else m.group(0), text)
    text = FLAG_SPACE.sub(lambda m: m.group(1) + m.group(2) + REDACTED if secret_name(m.group(1)) else m.group(0), text)
    return ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1)) else m.group(0), text)


class Redactor:
    """Applies the policy to data (configs, results) and to text (logs, summaries)."""

    def __init__(self, secret_values: set[str] | None = None):
        self.secret_values: set[str] = set()
        self.remember(secret_values or set())

    def remember(self, values) -> None:
        self.secret_values |= {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LENGTH and v != REDACTED}
        self.longest_first = sorted(self.secret_values, key=len, reverse=True)  # text() runs per string of every request

    def learn(self, data: Any) -> None:
        """Remember every secret value in `data` (and this process's secret-named
        environment variables), so text that repeats one is scrubbed too."""
        self.remember(values_in(data))
        self.remember(v for k, v in os.environ.items() if secret_name(k))

    def data(self, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: (REDACTED if secret_name(k) and isinstance(v, str) and v else self.data(v))
                    for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            if all(isinstance(item, (int, float)) for item in data):
                return list(data)  # numbers hide nothing: a request's chunk times and token ids pass at C speed
            out, hide_next = [], False
            for item in data:
                out.append(REDACTED if hide_next and isinstance(item, str) else self.data(item))
                hide_next = isinstance(item, str) and item.startswith("-") and "=" not in item and secret_name(item)
            return out
        if isinstance(data, str):
            return self.text(data)
        return data

    def text(self, text: str) -> str:
        text = redact_patterns(text)
        for value in self.longest_first:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def values_in(data: Any) -> set[str]:
    """Secret values anywhere in nested data: under secret keys, after secret flags in
    lists, and in strings (flags, URLs, headers, assignments)."""
    found: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            if secret_name(key) and isinstance(value, str):
                found.add(value)
            found |= values_in(value)
    elif isinstance(data, (list, tuple)):
        for before, item in zip([None, *data], data):
            if isinstance(before, str) and before.startswith("-") and "=" not in before and secret_name(before) \
                    and isinstance(item, str):
                found.add(item)
            found |= values_in(item)
    elif isinstance(data, str):
        found |= secrets_in_text(data)
    return found
