"""Secrets as a type: decided by where a value sits in the config, written as fingerprints.

A value of the composed config is a secret by its *location*, deny by default:
- every `server.env` / `nccl.env` value, except variables users need to read
  (:data:`READABLE_ENV`, each engine's `readable_env`, `record.readable_env`), and never a
  secret-named one (`VLLM_API_KEY`);
- every `build.build_args` value (Docker's own linter warns of secrets there);
- every value of a flag in `server.extra_args` (up to the next flag, `--api-keys K1 K2`: both;
  `--flag=V` too) unless the arm's engine declares the flag readable (`Engine.readable_flags`);
  a value before any flag as well. A JSON-valued argument keeps its shape: each string
  inside is secret unless its key is declared readable (`Engine.readable_json_keys`), and
  any value under a secret-named key;
- any value under a secret-named key (`api_key`, `hf_token`, `password`), anywhere;
- a URL's userinfo (`http://TOKEN@host`, the user alone included) and secret-named query
  parameters (`?api_key=V`), in any string.

`compose()` replaces each with its fingerprint, ``secret:<16 hex>`` (HMAC-SHA256 under a key
kept outside every record: :func:`fingerprint_key`), so whatever is written downstream (records,
summaries, the terminal, JUnit, a launcher's command line) carries the fingerprint, never text
to be found and scrubbed later; equal values have equal fingerprints across runs, so identity
checks still tell two models apart. The real values stay in this process's :data:`BOOK` and
come back only where a server, an image build or a client needs them (:meth:`SecretBook.reveal`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets as random_bytes
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

FINGERPRINT = re.compile(r"secret:[0-9a-f]{16}")

# A name (normalized: lower case, runs of non-alphanumerics as "_") is secret-like when its
# last word(s) are one of these; "per_token" (a rate, as in ms per token) is not.
SECRET_WORDS = (r"api_?keys?|access_?keys?|private_?keys?|secrets?(_access)?(_keys?)?|keys?|tokens?|passwords?|"
                r"passwd|passphrase|credentials?|auth|authorization|bearer|cookies?|pat")
SECRET_NAME = re.compile(rf"(^|_)({SECRET_WORDS})$")
# ... but not a count of tokens or keys: max_tokens, num_draft_tokens, prompt_tokens, top_k
NOT_SECRET_NAME = re.compile(r"(^|_)(num|max|min|n|total|count|prompt|completion|output|input|draft|new|cached|"
                             r"generation|generated|reasoning|eos|bos|pad|special|stop|top)_(\w+_)?(tokens?|keys?)$"
                             r"|(^|_)per_token$"
                             # a plural `tokens` after any other word is a count (`compute_knee_tokens`,
                             # `chunked_prefill_tokens`); after an auth word it is credentials (`api_tokens`)
                             r"|(^|_)(?!(api|access|auth|bearer|refresh|session|id|hf|gh|github|oauth|secret|user|"
                             r"service|bot|app|personal|cloud)_tokens$)[a-z0-9]+_tokens$")

# Environment variables users need to read (glob patterns): the tool's story is reading NCCL
# values, CUDA and engine tuning knobs. Any other variable's value is a secret.
READABLE_ENV = ("NCCL_*", "CUDA_*", "NVIDIA_*", "NVSHMEM_*", "GLOO_*", "UCX_*", "FI_*", "OMP_*", "MKL_*", "KMP_*",
                "TORCH_*", "PYTORCH_*", "TORCHINDUCTOR_*", "TORCHDYNAMO_*", "TRITON_*", "SPT_NOENV",
                "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONPATH", "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_HOME", "LD_LIBRARY_PATH", "PATH", "TZ",
                "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
ENV_KEYS = frozenset({"env", "vars", "environment"})  # where a mapping of environment variables sits
KEY_ENV = "SPECGATE_FINGERPRINT_KEY"


def secret_name(name: Any) -> bool:
    normalized = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
    return bool(SECRET_NAME.search(normalized)) and not NOT_SECRET_NAME.search(normalized)


def fingerprint_key() -> bytes:
    """The key fingerprints are made with: $SPECGATE_FINGERPRINT_KEY, else a random key kept in
    $XDG_CONFIG_HOME/specgate/fingerprint.key (made once, mode 0600), never in a record. Runs made
    with one key compare their secrets; a record does not let anyone test a guess at a value."""
    given = os.environ.get(KEY_ENV)
    if given:
        return given.encode()
    folder = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "specgate"
    path = folder / "fingerprint.key"
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        folder.mkdir(parents=True, exist_ok=True)
        key = random_bytes.token_hex(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
        return bytes.fromhex(key)


_KEY: list[bytes] = []  # read once per process


def fingerprint(value: Any) -> str:
    if not _KEY:
        _KEY.append(fingerprint_key())
    digest = hmac.new(_KEY[0], str(value).encode(), hashlib.sha256).hexdigest()
    return f"secret:{digest[:16]}"


def key_id() -> str:
    """Which key a record's fingerprints were made with (a fingerprint of a fixed text):
    fingerprints made with different keys cannot be compared."""
    return fingerprint("specgate fingerprint key id")[len("secret:"):]


@dataclass(frozen=True)
class Secret:
    """A secret value and where it was found; shown anywhere as its fingerprint."""

    value: Any = field(repr=False)
    where: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.value)

    def __str__(self) -> str:
        return self.fingerprint

    def __repr__(self) -> str:
        return f"Secret({self.where}: {self.fingerprint})"


class SecretBook:
    """Every secret this process has met (as GitHub Actions' add-mask, one per process: a
    forked load or a launcher's log follows the same book), by fingerprint, and the values
    the record shows anyway (arm names, the model path), which free text never loses."""

    def __init__(self) -> None:
        self.by_fingerprint: dict[str, Secret] = {}
        self.env_names: set[str] = set()  # variables whose values are secret: NAME=value in free text
        self.public: set[str] = set()

    def hide(self, value: Any, where: str) -> str:
        if isinstance(value, str) and FINGERPRINT.fullmatch(value):
            return value  # already a fingerprint (a config composed from a record)
        secret = Secret(value, where)
        self.by_fingerprint.setdefault(secret.fingerprint, secret)
        return secret.fingerprint

    def values(self) -> list[str]:
        return [str(s.value) for s in self.by_fingerprint.values()]

    def add_public(self, values: Iterable[Any]) -> None:
        self.public.update(str(v) for v in values if isinstance(v, (str, int, float)) and str(v))

    def reveal(self, data: Any) -> Any:
        """`data` with every fingerprint back to its value: for a server's command line and
        environment, an image's build args, a URL a client connects to. A JSON text's strings
        are restored as JSON (escaped), a whole fingerprint leaf as the value it stood for."""
        if isinstance(data, dict):
            return {k: self.reveal(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return type(data)(self.reveal(v) for v in data)
        if not isinstance(data, str) or "secret:" not in data:
            return data
        parsed = json_value(data)
        if parsed is not None:
            return json.dumps(self._reveal_json(parsed))
        return FINGERPRINT.sub(lambda m: str(self._value(m.group(0))), data)

    def conceal(self, data: Any) -> Any:
        """The inverse of :meth:`reveal` for what comes back from a server it was given to (a
        process's command line read from /proc): a token that is a secret's value, whatever its
        length, `--flag=value`, and a JSON text's leaves, as the fingerprints the config holds."""
        if isinstance(data, (list, tuple)):
            return type(data)(self.conceal(v) for v in data)
        if not isinstance(data, str) or not self.by_fingerprint:
            return data
        known = {str(s.value): mark for mark, s in self.by_fingerprint.items()}
        if data in known:
            return known[data]
        parsed = json_value(data)
        if parsed is not None:
            return json.dumps(self._conceal_json(parsed, known))
        name, eq, value = data.partition("=")
        if eq and value in known:
            return f"{name}={known[value]}"
        return data

    def _conceal_json(self, data: Any, known: dict[str, str]) -> Any:
        if isinstance(data, dict):
            return {k: self._conceal_json(v, known) for k, v in data.items()}
        if isinstance(data, list):
            return [self._conceal_json(v, known) for v in data]
        return known.get(data, data) if isinstance(data, str) else data

    def _reveal_json(self, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: self._reveal_json(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self._reveal_json(v) for v in data]
        if isinstance(data, str) and FINGERPRINT.fullmatch(data):
            return self._value(data)
        if isinstance(data, str):
            return FINGERPRINT.sub(lambda m: str(self._value(m.group(0))), data)
        return data

    def _value(self, mark: str) -> Any:
        secret = self.by_fingerprint.get(mark)
        if secret is None:
            raise SecretMissing(mark)
        return secret.value


class SecretMissing(Exception):
    """A fingerprint whose value this process does not know (a recorded config replayed
    without the secret it hid): the server would get the fingerprint instead of the value."""

    def __init__(self, mark: str):
        super().__init__(f"{mark} stands for a secret this run was not given: supply its value as an override "
                         f"(the record shows where it sits)")


BOOK = SecretBook()


def json_value(text: str) -> Any:
    """A JSON object or array written as text (a JSON-valued argument), or None."""
    stripped = text.strip()
    if not stripped[:1] in ("{", "["):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


# --- where secrets sit ------------------------------------------------------------------


@dataclass
class Policy:
    """Which values are readable: environment variables (glob patterns), and the engine's
    flags and JSON keys (for `server.extra_args`)."""

    readable_env: tuple[str, ...] = READABLE_ENV
    readable_flags: tuple[str, ...] = ()
    readable_json_keys: tuple[str, ...] = ()
    book: SecretBook = field(default_factory=lambda: BOOK)

    @classmethod
    def for_engine(cls, engine: Any, extra_env: Iterable[str] = (), book: SecretBook | None = None) -> "Policy":
        """The policy of an arm whose engine class is `engine` (None: no flag readable)."""
        own_env = tuple(getattr(engine, "readable_env", ()))
        return cls(readable_env=READABLE_ENV + own_env + tuple(extra_env),
                   readable_flags=tuple(getattr(engine, "readable_flags", ())),
                   readable_json_keys=tuple(getattr(engine, "readable_json_keys", ())), book=book or BOOK)

    def env_readable(self, name: Any) -> bool:
        return not secret_name(name) and any(fnmatch.fnmatchcase(str(name), p) for p in self.readable_env)

    def flag_readable(self, flag: str) -> bool:
        name = flag.split("=", 1)[0]
        return not secret_name(name) and any(fnmatch.fnmatchcase(name, p) for p in self.readable_flags)

    # the walk over a config (a plain container) ------------------------------------------
    def mask(self, data: Any, path: tuple[str, ...] = ()) -> Any:
        """`data` with every secret, by where it sits, replaced by its fingerprint."""
        where = ".".join(path)
        if isinstance(data, dict):
            return {k: self.mask_entry(path, str(k), v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            if path[-2:] == ("server", "extra_args") or path[-1:] == ("extra_args",):
                return self.mask_args([str(a) for a in data], where)
            return [self.mask(v, (*path, str(i))) for i, v in enumerate(data)]
        if isinstance(data, str):
            return self.mask_text(data, where)
        return data

    def mask_entry(self, path: tuple[str, ...], key: str, value: Any) -> Any:
        here = (*path, key)
        where = ".".join(here)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, (str, int, float)):
            if secret_name(key) and isinstance(value, str):  # a number under `*_tokens` is a count
                return self.book.hide(value, where)
            if path[-1:] and path[-1] in ENV_KEYS and not self.env_readable(key):
                self.book.env_names.add(key)
                return self.book.hide(value, where)
            if path[-1:] == ("build_args",):
                return self.book.hide(value, where)
        in_env = bool(path[-1:]) and path[-1] in ENV_KEYS and not self.env_readable(key)
        if isinstance(value, (dict, list)) and (secret_name(key) or in_env or path[-1:] == ("build_args",)):
            return self.hide_leaves(value, where)  # a sweep's values (`+server.env.X=a,b`), each of them
        return self.mask(value, here)

    def hide_leaves(self, data: Any, where: str) -> Any:
        if isinstance(data, dict):
            return {k: self.hide_leaves(v, f"{where}.{k}") for k, v in data.items()}
        if isinstance(data, list):
            return [self.hide_leaves(v, f"{where}.{i}") for i, v in enumerate(data)]
        return self.book.hide(data, where) if isinstance(data, str) else data

    def mask_args(self, tokens: list[str], where: str) -> list[str]:
        """A command line's extra tokens: every value up to the next flag is secret unless
        the flag is readable; `--flag=V` the same; a value before any flag is secret."""
        out: list[str] = []
        readable = False
        for token in tokens:
            if is_flag(token):
                name, sep, value = flag_parts(token)
                readable = self.flag_readable(name)
                out.append(f"{name}{sep}{self.mask_arg(value, readable, f'{where} {name}')}" if sep else token)
            else:
                out.append(self.mask_arg(token, readable, f"{where} value"))
        return out

    def mask_arg(self, value: str, readable: bool, where: str) -> str:
        parsed = json_value(value)
        if parsed is not None:  # keys stay readable; each value inside by its key
            return json.dumps(self.mask_json(parsed, where, readable))
        return self.mask_text(value, where) if readable else self.book.hide(value, where)

    def mask_json(self, data: Any, where: str, readable: bool, key: str = "") -> Any:
        if isinstance(data, dict):
            return {k: self.mask_json(v, f"{where}.{k}", readable, str(k)) for k, v in data.items()}
        if isinstance(data, list):
            return [self.mask_json(v, where, readable, key) for v in data]
        if not isinstance(data, str):
            return data  # a number or boolean carries no credential (and `*_tokens` is a count)
        if secret_name(key):
            return self.book.hide(data, where)
        if isinstance(data, str):
            key_readable = readable and (not key or key in self.readable_json_keys)
            return self.mask_text(data, where) if key_readable else self.book.hide(data, where)
        return data  # a number under a readable or ordinary key carries no credential

    def mask_text(self, text: str, where: str) -> str:
        """URL userinfo (the user alone too) and secret-named query parameters in one string."""
        if "@" in text:
            text = URL_USERINFO.sub(lambda m: m.group(1) + self.book.hide(m.group(2), f"{where} (URL user)") + "@", text)
        if "=" in text and ("?" in text or "&" in text):
            text = QUERY_PARAM.sub(lambda m: m.group(1) + self.book.hide(m.group(3), f"{where} ({m.group(2)})")
                                   if secret_name(m.group(2)) else m.group(0), text)
        return text


URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)([^/\s@?#]+)@")
QUERY_PARAM = re.compile(r"([?&;]([^=&;\s#]+)=)([^&;\s#\"'<>]+)")


def flag_parts(token: str) -> tuple[str, str, str]:
    """`--flag=V` and `--flag V` written as one token (a list item with a space): name, separator, value."""
    match = re.match(r"^(-[^=\s]*)([=\s]+)(.*)$", token, re.DOTALL)
    return (match.group(1), match.group(2), match.group(3)) if match else (token, "", "")


def is_flag(token: str) -> bool:
    """`--flag` or `-f`, not a negative number (`-1`, `-0.5` are values)."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token.split("=", 1)[0])
        return False
    except ValueError:
        return True


# --- overrides as typed ---------------------------------------------------------------


def override_secrets(override: str, policy: Policy) -> list[str]:
    """The secret values one `key=value` override holds, by where its key puts them (the
    same walk as a config's), as typed: parsed by Hydra when it parses, else split at '='.
    Each is also entered in the policy's book (the terminal and free text scrub it)."""
    key, value = parse_override(override)
    if key is None:
        return []
    nested: Any = value
    for part in reversed(key.split(".")):
        nested = {part: nested}
    found = SecretBook()
    replace(policy, book=found).mask(nested)
    for secret in found.by_fingerprint.values():
        policy.book.hide(secret.value, secret.where)
    policy.book.env_names |= found.env_names
    return [str(v) for v in found.values() if str(v)]


def parse_override(override: str) -> tuple[str | None, Any]:
    text = override.strip()
    if ":" in text.split("=", 1)[0]:  # specgate ab's side prefix, `a:server.env.X=V`
        text = text.split(":", 1)[1]
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_override(text)
        value = parsed.value()
        if parsed.is_sweep_override():
            value = [str(v) for v in getattr(value, "list", []) or []] or str(parsed.get_value_element_as_str())
        return str(parsed.key_or_group), value
    except Exception:  # as typed and unparsable (a Hydra error quotes it): split leniently
        match = re.match(r"^[+~]*([A-Za-z_][\w.@/-]*)=(.*)$", text, re.DOTALL)
        if not match:
            return None, None
        value = match.group(2).strip()
        if value.startswith("["):
            return match.group(1), [t.strip(" \"'") for t in re.split(r"[\[\],]", value) if t.strip(" \"'")]
        return match.group(1), value.strip("\"'")


def masked_override(override: str, policy: Policy, encode: Callable[[str], list[str]] | None = None) -> str:
    """An override as it may be shown: each secret it holds, in whichever form it was typed
    (quoted, Hydra-escaped, JSON-escaped), as its fingerprint; nothing else changed."""
    shown = override
    for value in sorted(override_secrets(override, policy), key=len, reverse=True):
        for form in sorted(set((encode or encodings)(value)), key=len, reverse=True):
            if form:
                shown = shown.replace(form, fingerprint(value))
    return shown


def hydra_escaped(value: str) -> str:
    return re.sub(r"([\\()\[\]{}:=, \t])", r"\\\1", value)


def encodings(value: str) -> list[str]:
    """Every form a value takes in text: as typed, Hydra- and shell-escaped, JSON-quoted,
    URL-encoded, a Python repr's."""
    from shlex import quote as shell_quote
    from urllib.parse import quote, quote_plus

    forms = {value, hydra_escaped(value), shell_quote(value), json.dumps(value)[1:-1], quote(value, safe=""),
             quote_plus(value), repr(value)[1:-1], value.replace(" ", "\\ ")}
    return sorted((f for f in forms if f), key=len, reverse=True)


def leaves(data: Any) -> list[str]:
    """Every scalar of nested data, as text."""
    if isinstance(data, dict):
        return [x for v in data.values() for x in leaves(v)]
    if isinstance(data, (list, tuple)):
        return [x for v in data for x in leaves(v)]
    return [str(data)] if data is not None else []
