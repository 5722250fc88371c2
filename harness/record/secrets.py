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

Secrets are known by *where they are*, not only by what they look like:
- every value of a server's environment (`server.env`, `nccl.env`, a process's configured
  variables in the record) is secret unless its name is one users need to read
  (:data:`READABLE_ENV`: NCCL_*, CUDA_*; each engine's own tuning variables, its class's
  `readable_env`; `record.readable_env`
  adds patterns) and does not look secret itself (`VLLM_API_KEY` never reads);
- every value after a secret-named flag up to the next flag (`--api-key k1 k2`: both);
- a whole override's value when its key is secret-named or a non-readable environment
  variable (`+server.env.DB_PASSWORD="correct horse battery staple"`, spaces and all).
Learned values are replaced first, whole, before the patterns run, so a value with spaces
is never half-redacted.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Any, Iterable

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
FLAG_SPACE = re.compile(r"(--?[A-Za-z][\w.-]*)((?:[ \t]+(?!-)\S+)+)")  # a flag and every value up to the next flag
ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=([^\s&;]+)")
# URL userinfo needs ':', a query parameter and an assignment '=', a header ':' or '=', a flag '-'
PATTERN_CHARS = frozenset("=:-")


# Environment variables users need to read (glob patterns): the tool's story is reading NCCL
# values, CUDA and engine tuning knobs. Any other variable's value is a secret.
READABLE_ENV = ("NCCL_*", "CUDA_*", "NVIDIA_*", "NVSHMEM_*", "GLOO_*", "UCX_*", "FI_*", "OMP_*", "MKL_*", "KMP_*",
                "TORCH_*", "PYTORCH_*", "TORCHINDUCTOR_*", "TRITON_*", "SPT_NOENV",
                "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONPATH", "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_HOME", "LD_LIBRARY_PATH", "PATH", "TZ",
                "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
ENV_KEYS = frozenset({"env", "vars"})  # where a mapping of environment variables sits (config, record)
OVERRIDE = re.compile(r"^[+~]*([A-Za-z_][\w.@/-]*)=(.*)$", re.DOTALL)


def readable_patterns() -> tuple[str, ...]:
    """The allow-list: the general one and each engine's own tuning variables (its class says which)."""
    from harness.engines import ENGINES  # the engines own their names (tests/engines/test_engines.py)
    return READABLE_ENV + tuple(p for engine in ENGINES.values() for p in engine.readable_env)


def readable_env(name: Any, extra: Iterable[str] = ()) -> bool:
    """An environment variable whose value may be shown: on the allow-list and not secret-named."""
    return not secret_name(name) and any(fnmatch.fnmatchcase(str(name), p) for p in (*readable_patterns(), *extra))


def secret_override_key(key: str, extra: Iterable[str] = ()) -> bool:
    """An override key whose whole value is secret: secret-named, or an environment variable
    (`server.env.X`, `nccl.env.X`) that is not readable."""
    parts = key.split(".")
    if secret_name(parts[-1]):
        return True
    return len(parts) >= 2 and parts[-2] in ENV_KEYS and not readable_env(parts[-1], extra)


def secrets_in_override(text: str, extra: Iterable[str] = ()) -> set[str]:
    """The secret values of one `key=value` override as typed (parsed or not: a Hydra parse
    error quotes it): the whole value of a secret key, each of its comma-separated values
    (a sweep), and the values after secret flags in a list value (`[--api-key,k1,k2]`)."""
    match = OVERRIDE.match(text.strip())
    if not match:
        return set()
    key, value = match.group(1), match.group(2).strip()
    found: set[str] = set()
    if secret_override_key(key, extra):
        found.add(value.strip("\"'"))
        found |= {part.strip(" \"'[]") for part in value.split(",")}
    if value.startswith("["):
        tokens = [t.strip(" \"'") for t in re.split(r"[\[\],]", value) if t.strip(" \"'")]
        found |= flag_values(tokens)
    return {v for v in found if v}


def flag_values(tokens: list[str]) -> set[str]:
    """In a command line's tokens: every value after a secret-named flag up to the next flag."""
    found, hiding = set(), False
    for token in tokens:
        if token.startswith("-"):
            hiding = "=" not in token and secret_name(token)
        elif hiding:
            found.add(token)
    return found


def secret_name(name: Any) -> bool:
    normalized = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
    return bool(SECRET_NAME.search(normalized)) and not NOT_SECRET_NAME.search(normalized)


def secrets_in_text(text: str) -> set[str]:
    """The secret values the patterns find in `text` (flags, URLs, headers, assignments)."""
    found = {m.group(2) for m in URL_USERINFO.finditer(text)}
    found |= {m.group(3) for m in QUERY_PARAM.finditer(text) if secret_name(m.group(2))}
    found |= {m.group(4) for m in HEADER.finditer(text)}
    found |= {m.group(2) for m in FLAG_EQUALS.finditer(text) if secret_name(m.group(1))}
    found |= {value for m in FLAG_SPACE.finditer(text) if secret_name(m.group(1)) for value in m.group(2).split()}
    found |= {m.group(2) for m in ASSIGNMENT.finditer(text) if secret_name(m.group(1))}
    return {v.strip("\"'") for v in found if v.strip("\"'") and v.strip("\"'") != REDACTED}


def redact_patterns(text: str) -> str:
    if not PATTERN_CHARS.intersection(text):
        return text  # every pattern needs one of these: a request's tokens and texts mostly skip all six
    text = URL_USERINFO.sub(rf"\1{REDACTED}\3", text)
    text = QUERY_PARAM.sub(lambda m: m.group(1) + REDACTED if secret_name(m.group(2)) else m.group(0), text)
    text = HEADER.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) or "") + REDACTED, text)
    text = FLAG_EQUALS.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1)) else m.group(0), text)
    text = FLAG_SPACE.sub(lambda m: m.group(1) + re.sub(r"\S+", REDACTED, m.group(2)) if secret_name(m.group(1))
                          else m.group(0), text)
    return ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1)) else m.group(0), text)


class Redactor:
    """Applies the policy to data (configs, results) and to text (logs, summaries)."""

    def __init__(self, secret_values: set[str] | None = None, readable: Iterable[str] = ()):
        self.readable = tuple(readable)  # record.readable_env: more environment variables users may read
        self.secret_values: set[str] = set()
        self.remember(secret_values or set())

    def remember(self, values) -> None:
        self.secret_values |= {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LENGTH and v != REDACTED}
        self.longest_first = sorted(self.secret_values, key=len, reverse=True)  # text() runs per string of every request

    def learn(self, data: Any) -> None:
        """Remember every secret value in `data` (and this process's secret-named
        environment variables), so text that repeats one is scrubbed too."""
        self.remember(values_in(data, self.readable))
        self.remember(v for k, v in os.environ.items() if secret_name(k))

    def data(self, data: Any, key: Any = None) -> Any:
        """``data`` with every secret replaced; ``key``: the key it sits under."""
        if isinstance(data, dict):
            in_env = key in ENV_KEYS
            return {k: (REDACTED if self.hidden(k, v, in_env) else self.data(v, k)) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            if all(isinstance(item, (int, float)) for item in data):
                return list(data)  # numbers hide nothing: a request's chunk times and token ids pass at C speed
            out, hiding = [], False
            for item in data:
                if isinstance(item, str) and item.startswith("-"):
                    out.append(self.data(item))
                    hiding = "=" not in item and secret_name(item)
                else:
                    out.append(REDACTED if hiding and isinstance(item, str) else self.data(item))
            return out
        if isinstance(data, str):
            return self.text(data)
        return data

    def hidden(self, key: Any, value: Any, in_env: bool) -> bool:
        """A value shown as *** where it sits: under a secret-named key, or an environment
        variable users need not read, whatever its length."""
        if not isinstance(value, str) or not value:
            return False
        return secret_name(key) or (in_env and not readable_env(key, self.readable))

    def text(self, text: str) -> str:
        for value in self.longest_first:  # learned values first, whole: a pattern would stop at a space
            if value in text:
                text = text.replace(value, REDACTED)
        return redact_patterns(text)

    def override_label(self, override: str) -> str:
        """An override as a folder name may show it: a secret value becomes `redacted`."""
        match = OVERRIDE.match(override.strip())
        if match and secret_override_key(match.group(1), self.readable):
            return f"{match.group(1)}=redacted"
        return self.text(override)


def values_in(data: Any, readable: Iterable[str] = (), key: Any = None) -> set[str]:
    """Secret values anywhere in nested data: under secret keys, environment variables users
    need not read, after secret flags in lists (every value up to the next flag), and in
    strings (an override as typed; flags, URLs, headers, assignments)."""
    found: set[str] = set()
    if isinstance(data, dict):
        in_env = key in ENV_KEYS
        for name, value in data.items():
            if isinstance(value, str) and (secret_name(name) or (in_env and not readable_env(name, readable))):
                found.add(value)
            found |= values_in(value, readable, name)
    elif isinstance(data, (list, tuple)):
        found |= flag_values([item for item in data if isinstance(item, str)])
        for item in data:
            found |= values_in(item, readable)
    elif isinstance(data, str):
        found |= secrets_in_text(data) | secrets_in_override(data, readable)
    return found


def terminal_text(text: str, argv: list[str]) -> str:
    """A message for the terminal, with every secret the command line holds redacted (a
    Hydra parse error quotes the override it could not parse, as typed)."""
    redactor = Redactor()
    redactor.learn(list(argv))
    return redactor.text(text)
