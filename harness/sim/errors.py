"""SGLang's error bodies (``ErrorResponse``) and FastAPI's validation-error text."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

CONTENT_TYPE_ERROR = {
    "loc": ["header", "content-type"],
    "msg": "Unsupported Media Type: Only 'application/json' is allowed",
    "type": "value_error",
}


def dumps(obj: Any) -> str:
    """Compact JSON like orjson / pydantic's model_dump_json."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(obj), status=status, content_type="application/json")


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict:
    # Field order of sglang.srt.entrypoints.openai.protocol.ErrorResponse.
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": code}


def validation_message(errors: list[dict]) -> str:
    """``f"{exc} {exc.errors()}"`` of a FastAPI RequestValidationError (SGLang's 400 handler)."""
    n = len(errors)
    text = f"{n} validation error{'s' if n != 1 else ''}:\n"
    for err in errors:
        text += f"  {err}\n"
    text = text.rstrip()
    errors_str = str(errors)
    return f"{text} {errors_str}" if errors_str and errors_str != text else text


def validation_error(errors: list[dict]) -> web.Response:
    """SGLang's RequestValidationError handler: 400 with ``type: "Bad Request"``."""
    return json_response(error_body(validation_message(errors), "Bad Request", 400), status=400)


def bad_request(message: str, err_type: str = "BadRequestError", status: int = 400, param: str | None = None) -> web.Response:
    """OpenAIServingBase.create_error_response."""
    return json_response(error_body(message, err_type, status, param), status=status)


def missing_field(loc: str, body: Any) -> dict:
    return {"type": "missing", "loc": ("body", loc), "msg": "Field required", "input": body}


def invalid_field(loc: tuple, msg: str, value: Any, err_type: str) -> dict:
    return {"type": err_type, "loc": ("body", *loc), "msg": msg, "input": value}
