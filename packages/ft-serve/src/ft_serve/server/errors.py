"""ApiError: one error raised anywhere in the server, rendered in the schema of the API that was called.

OpenAI     {"error": {"message", "type", "param", "code"}}
Anthropic  {"type": "error", "error": {"type", "message"}}
"""

from __future__ import annotations

from starlette.responses import JSONResponse

# status -> (OpenAI error type, Anthropic error type)
_TYPES = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    409: ("conflict_error", "invalid_request_error"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "invalid_request_error"),
    429: ("rate_limit_error", "rate_limit_error"),
    500: ("server_error", "api_error"),
    503: ("overloaded_error", "overloaded_error"),
}


class ApiError(Exception):
    """An error answered to the client: HTTP ``status``, a message naming the field or limit, ``param``
    (the offending field, dotted path) and an optional machine-readable ``code``."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code)


def openai_body(e: ApiError) -> dict:
    t = _TYPES.get(e.status, _TYPES[500])[0]
    return {"error": {"message": e.message, "type": t, "param": e.param, "code": e.code}}


def anthropic_body(e: ApiError) -> dict:
    t = _TYPES.get(e.status, _TYPES[500])[1]
    msg = e.message if e.param is None or e.param in e.message else f"{e.param}: {e.message}"
    return {"type": "error", "error": {"type": t, "message": msg}}


def schema_of(path: str) -> str:
    """The error schema of the API at ``path``: "anthropic" under /v1/messages, else "openai"."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


def error_response(e: ApiError, schema: str) -> JSONResponse:
    """``schema``: "openai" or "anthropic"."""
    body = anthropic_body(e) if schema == "anthropic" else openai_body(e)
    headers = {"retry-after": "1"} if e.status in (429, 503) else None
    return JSONResponse(body, status_code=e.status, headers=headers)
