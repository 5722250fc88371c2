"""specgate's HTTP client, a leaf (it imports nothing of the project): this module and :mod:`harness.load.requests` are the only
code in the harness that speaks HTTP.

* Control plane (``requests``, synchronous): :class:`ServerClient` -- health checks,
  model info, ``/metrics`` text, JSON info routes, waiting for a server to come up.
  Every failure a user can cause (connection refused, non-2xx status, a body that is
  not JSON) becomes a :class:`ClientError` carrying one sentence that includes the
  server's own error text.  Every POST sends ``Content-Type: application/json``, except
  :meth:`ServerClient.post_form`, a deliberate probe that the server refuses non-JSON.

* Data plane: the streamed requests of a load live in :mod:`harness.load.requests`;
  they share this module's JSON header, SSE parsing and error-message helpers.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Optional

import orjson
import requests

log = logging.getLogger(__name__)

JSON_HEADERS = {"Content-Type": "application/json"}
_MSG_LIMIT = 500
FIRST_POLL_S = 0.05  # a health poll's first wait; each next one doubles up to the caller's poll_s


# --------------------------------------------------------------------------- errors


class ClientError(Exception):
    """Something went wrong talking to a server; str() is one sentence for the user."""


class ServerUnreachable(ClientError):
    """Connection refused, reset, or timed out."""


class ServerRefused(ServerUnreachable):
    """Nothing accepted the connection (refused or reset): not merely slow."""


class ServerHTTPError(ClientError):
    """The server answered with a non-2xx status."""

    def __init__(self, message: str, status: int, server_message: str):
        super().__init__(message)
        self.status = status
        self.server_message = server_message


class ServerBadResponse(ClientError):
    """The server answered 2xx, but not with what the endpoint promises (e.g. bad JSON)."""


class ServerUnhealthy(ClientError):
    """The server did not become healthy (process died, or the deadline passed)."""


def _message_of(obj: Any) -> str:
    """The human message inside an error payload of any of the shapes servers use.

    ``{"object": "error", "message": ...}`` (OpenAI routes), ``{"error": {"message": ...}}``
    (/generate stream, /v1/responses), ``{"error": "..."}``, ``{"detail": ...}`` (FastAPI).
    """
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        for key in ("message", "error", "detail", "msg"):
            if key in obj and obj[key] not in (None, ""):
                return _message_of(obj[key])
        return json.dumps(obj)[:_MSG_LIMIT]
    if isinstance(obj, list):
        return "; ".join(_message_of(x) for x in obj)[:_MSG_LIMIT]
    return str(obj)


def _error_of(event: dict) -> str | None:
    """The message of a parsed JSON object that is an error (``{"error": ...}`` or
    ``{"object": "error", "message": ...}``), else None."""
    if event.get("error") is not None:
        return _message_of(event["error"])[:_MSG_LIMIT]
    if event.get("object") == "error":
        return _message_of(event)[:_MSG_LIMIT]
    return None


def server_error_message(body: str | bytes) -> str:
    """The server's own error text from a response body (JSON or plain)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(body)
    except ValueError:
        text = body.strip()
        return text[:_MSG_LIMIT] if text else "(empty body)"
    return _message_of(data)[:_MSG_LIMIT]


# --------------------------------------------------------------------------- control plane


class ServerClient:
    """Synchronous control-plane client for one server: the routes every engine has, and
    ``get_json`` for an engine's own (harness/engines knows which)."""

    def __init__(self, base_url: str, timeout_s: float = 10):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "ServerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing
    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout_s: float | None = None,
        check: bool = True,
        stream: bool = False,
    ) -> requests.Response:
        url = self.base_url + path
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            if method == "POST":
                resp = self._session.post(
                    url,
                    data=json.dumps({} if body is None else body),
                    headers=JSON_HEADERS,
                    timeout=timeout,
                    stream=stream,
                )
            else:
                resp = self._session.get(url, timeout=timeout)
        except requests.Timeout:
            raise ServerUnreachable(f"{method} {url} timed out after {timeout:g}s.") from None
        except requests.ConnectionError as e:
            raise ServerRefused(f"Cannot connect to {url} (is the server running?): {_short(e)}.") from None
        except requests.RequestException as e:
            raise ClientError(f"{method} {url} failed: {_short(e)}.") from None
        if check and not 200 <= resp.status_code < 300:
            msg = server_error_message(resp.content)
            raise ServerHTTPError(f"{method} {url} returned HTTP {resp.status_code}: {msg}", resp.status_code, msg)
        return resp

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        resp = self._request(method, path, body)
        try:
            return resp.json()
        except ValueError:
            snippet = resp.text[:200]
            raise ServerBadResponse(
                f"{method} {self.base_url + path} returned a body that is not JSON: {snippet!r}"
            ) from None

    def _ok(self, path: str, timeout_s: float | None = None) -> tuple[bool, str]:
        try:
            self._request("GET", path, timeout_s=timeout_s)
            return True, "ok"
        except ClientError as e:
            return False, str(e)

    # -- routes every engine has; engine-specific routes come from harness/engines
    def health(self) -> bool:
        return self._ok("/health")[0]

    def get(self, path: str, timeout_s: float | None = None) -> None:
        """GET ``path`` expecting 2xx (ClientError otherwise; ServerRefused when nothing
        accepted the connection)."""
        self._request("GET", path, timeout_s=timeout_s)

    def get_json(self, path: str) -> Any:
        """GET ``path`` and parse its JSON body (ClientError on failure)."""
        return self._json("GET", path)

    def models(self) -> dict:
        return self._json("GET", "/v1/models")

    def metrics_text(self) -> str:
        return self._request("GET", "/metrics").text

    def post_json(self, path: str, body: Any, check: bool = True) -> requests.Response:
        """POST ``body`` as JSON.  ``check``: raise :class:`ServerHTTPError` on non-2xx
        (default); False returns the response whatever its status."""
        return self._request("POST", path, body, check=check)

    def post_form(self, path: str, body: dict) -> requests.Response:
        """POST ``body`` form-encoded (application/x-www-form-urlencoded) -- the one POST
        that is not JSON, on purpose: a probe that the server refuses non-JSON bodies.  Returns the response whatever its status."""
        url = self.base_url + path
        try:
            return self._session.post(url, data=body, timeout=self.timeout_s)
        except requests.Timeout:
            raise ServerUnreachable(f"POST {url} timed out after {self.timeout_s:g}s.") from None
        except requests.ConnectionError as e:
            raise ServerUnreachable(f"Cannot connect to {url} (is the server running?): {_short(e)}.") from None

    def stream_events(self, path: str, body: Any) -> list[dict]:
        """POST ``body`` as JSON and read the whole SSE stream: the parsed ``data:``
        events in order, without the final ``[DONE]``.  A stream without ``[DONE]``, an
        error event, or a line that is not SSE/JSON raises :class:`ServerBadResponse`."""
        url = self.base_url + path
        resp = self._request("POST", path, body, stream=True)
        events: list[dict] = []
        done = False
        try:
            for line in resp.iter_lines():
                try:
                    payload = _sse_payload(line)
                    if payload is None:
                        continue
                    if payload == b"[DONE]":
                        done = True
                        continue
                    event = _loads(payload)
                except _StreamFailure as e:
                    raise ServerBadResponse(f"POST {url}: {e}") from None
                message = _error_of(event)
                if message is not None:
                    raise ServerBadResponse(f"POST {url}: server error mid-stream: {message}")
                events.append(event)
        except requests.RequestException as e:
            raise ServerUnreachable(f"POST {url}: connection dropped mid-stream after {len(events)} events: {_short(e)}.") from None
        finally:
            resp.close()
        if not done:
            raise ServerBadResponse(f"POST {url}: the stream ended without [DONE] after {len(events)} events.")
        return events

    def served_model(self, fallback_route: str | None = None, wanted: str | None = None) -> str:
        """The model name to send in requests: ``wanted`` (server.served_model_name) when
        /v1/models lists it, else the one model it lists, else the ``model_path`` of the
        engine's own info route (``fallback_route``). A list without ``wanted``, or of
        several models with none wanted (a base model and its LoRA adapters), is a
        ClientError: measuring the first of them would measure a model nobody chose."""
        first_error: ClientError | None = None
        try:
            data = self.models().get("data") or []
            ids = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
            if ids:
                return chosen_model(self.base_url, ids, wanted)
        except (ClientError, AttributeError) as e:
            first_error = e if isinstance(e, ClientError) else None
            if isinstance(e, ModelChoiceError):
                raise
        if fallback_route is None:
            raise ClientError(f"Cannot tell which model {self.base_url} serves: /v1/models listed none"
                              f"{f' ({first_error})' if first_error else ''}.")
        try:
            info = self.get_json(fallback_route)
            if isinstance(info, dict) and info.get("model_path"):
                return str(info["model_path"])
        except ClientError as e:
            raise ClientError(
                f"Cannot tell which model {self.base_url} serves: /v1/models and {fallback_route} both failed ({e})."
            ) from None
        raise ClientError(
            f"Cannot tell which model {self.base_url} serves: /v1/models listed none and {fallback_route} "
            f"has no model_path{f' ({first_error})' if first_error else ''}."
        )

    def wait_healthy(
        self,
        deadline_s: float,
        is_alive: Callable[[], bool] | None = None,
        poll_s: float = 0.5,
        paths: tuple[str, ...] = ("/health",),
    ) -> float:
        """Poll the engine's health routes (``paths``, in order) until all answer 200.

        ``deadline_s`` is how long to wait from now.  ``is_alive`` (e.g. "the server
        process has not exited") is checked every poll; when it says False the wait stops
        at once.  Returns the seconds waited; raises :class:`ServerUnhealthy`.
        """
        start = time.monotonic()
        end = start + deadline_s
        last, polls = "no answer yet", 0
        while True:
            if is_alive is not None and not is_alive():
                raise ServerUnhealthy(
                    f"The server process exited before {self.base_url} became healthy "
                    f"(after {time.monotonic() - start:.1f}s; last check: {last})."
                )
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            for path in paths:
                ok, last = self._ok(path, max(0.5, min(self.timeout_s, end - time.monotonic())))
                if not ok:
                    break
            else:
                return time.monotonic() - start
            # the first polls come quickly (a small server is up in a fraction of a second),
            # then every poll_s: a model loading for minutes is not asked 20 times a second
            wait = min(poll_s, FIRST_POLL_S * 2 ** polls)
            polls += 1
            time.sleep(max(0.0, min(wait, end - time.monotonic())))
        raise ServerUnhealthy(
            f"{self.base_url} was not healthy within {deadline_s:g}s (last check: {last})."
        )


def _short(e: BaseException) -> str:
    text = str(e)
    # urllib3 wraps the useful part deep inside; keep the tail that names the cause
    if "Errno" in text:
        i = text.find("[Errno")
        text = text[i:].rstrip(")'\"")
    return text[:300]


# --------------------------------------------------------------------------- SSE parsing (both planes)


class _StreamFailure(Exception):
    """An SSE stream that is not what it promises; str() is one sentence."""


def _sse_payload(line: bytes) -> Optional[bytes]:
    """The data payload of one SSE line; None for lines to skip; raises on garbage."""
    if line.startswith(b"data:"):
        return line[5:].strip()
    s = line.strip()
    if not s or s.startswith(b":") or s.startswith((b"event:", b"id:", b"retry:")):
        return None
    raise _StreamFailure(f"malformed SSE line: {s[:200].decode('utf-8', 'replace')!r}")


def _loads(payload: bytes) -> dict:
    # orjson: a streamed chunk parses in ~1.2 us against json's ~5.3 us (a 400-byte
    # completions chunk), on the load's hot path once per chunk
    try:
        data = orjson.loads(payload)
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        data = None
    if not isinstance(data, dict):
        raise _StreamFailure(f"malformed SSE line: data is not a JSON object: {payload[:200].decode('utf-8', 'replace')!r}")
    return data


class ModelChoiceError(ClientError):
    """/v1/models does not let the configured model be measured (one sentence)."""


def chosen_model(base_url: str, ids: list[str], wanted: str | None) -> str:
    """Which of the listed models to send requests to (see ServerClient.served_model)."""
    listed = ", ".join(ids)
    if wanted:
        if wanted in ids:
            return wanted
        raise ModelChoiceError(f"{base_url} serves {listed}, not server.served_model_name '{wanted}'")
    if len(ids) > 1:
        raise ModelChoiceError(f"{base_url} serves several models ({listed}): set server.served_model_name to "
                               f"the one to measure")
    return ids[0]
