"""The Starlette application: routes, API-key check, errors in the called API's schema, metrics.

app = build_app(engine, ServerConfig(model_name="m"))   # then serve with uvicorn
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ft_core.errors import RequestError

from ft_serve.api import (
    admin,
    anthropic_messages,
    models,
    openai_chat,
    openai_completions,
    openai_responses,
)
from ft_serve.api.admin import check_admin
from ft_serve.api.sse import json_body
from ft_serve.server.auth import require_key
from ft_serve.server.config import ServerConfig
from ft_serve.server.elastic_loop import ElasticLoop
from ft_serve.server.engine_loop import EngineLoop
from ft_serve.server.errors import ApiError, error_response, schema_of
from ft_serve.server.guard import Guard, GuardRules
from ft_serve.server.metrics import Metrics
from ft_serve.server.service import Service

log = logging.getLogger("ft.serve")
Handler = Callable[
    [Starlette, Request, dict], Awaitable[object]
]  # (app, request, parsed body) -> JSON or Response


def _api_route(path: str, handler: Handler, auth: str = "api", method: str = "POST"):
    """A JSON API endpoint: auth, body parsing, ApiError -> the API's error schema, no stack traces.
    ``handler`` (an ft_serve.api function) is called as ``await handler(app, request, body)``.
    ``auth``: "api" (the API key, when set) or "admin" (admin rules, see api/admin.py)."""
    schema = schema_of(path)

    async def endpoint(request: Request):
        app = request.app
        status = 500
        try:
            if auth == "admin":
                check_admin(app.state.config, request)
            else:
                _check_key(app.state.config, request)
            limit = app.state.config.max_body_size
            body = await json_body(request, limit) if method == "POST" else {}
            out = await handler(app, request, body)
            status = 200
            return out if isinstance(out, Response) else JSONResponse(out)
        except ApiError as e:
            status = e.status
            return error_response(e, schema)
        except (
            RequestError
        ) as e:  # the engine or the chat template refused the request (it says why)
            status = 400
            return error_response(ApiError(400, str(e)), schema)
        except Exception:  # a bug: log it, answer 500 without internals
            log.exception("unhandled error on %s", path)
            return error_response(
                ApiError(500, "internal server error (see the server log)"), schema
            )
        finally:
            app.state.metrics.request(path, status)

    return Route(path, endpoint, methods=[method])


def _check_key(config: ServerConfig, request: Request) -> None:
    if config.api_key:
        require_key(request, [config.api_key], "API key")


async def _root(request: Request):
    if request.method == "HEAD":
        return Response(status_code=200)
    return JSONResponse(
        {"name": "ft", "model": request.app.state.config.model_name, "status": "ok"}
    )


async def _health(request: Request):
    """200 {"status": "ok", ...}; 503 {"status": "dead" | "wedged", "reason", ...} when the engine
    thread has stopped, or has work and has not ticked for --engine-stall-seconds."""
    h = request.app.state.loop.health()
    return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)


async def _metrics(request: Request):
    """Prometheus text; behind the API key (or the admin key) when one is set, unless
    --metrics-public (scrapers send it as a bearer token: ``authorization.credentials_file``)."""
    from prometheus_client import CONTENT_TYPE_LATEST

    config = request.app.state.config
    keys = [k for k in (config.api_key, config.admin_key) if k]
    if config.api_key and not config.metrics_public:
        try:
            require_key(request, keys, "API key (or --metrics-public on the server)")
        except ApiError as e:
            return error_response(e, "openai")
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def _not_found(request: Request, exc):
    return error_response(
        ApiError(404, f"no endpoint {request.method} {request.url.path}"),
        schema_of(request.url.path),
    )


async def _method_not_allowed(request: Request, exc):
    code = getattr(exc, "status_code", 405)
    if code == 404:
        return await _not_found(request, exc)
    return error_response(
        ApiError(405, f"{request.method} is not allowed on {request.url.path}"),
        schema_of(request.url.path),
    )


def server_secret() -> bytes:
    """The key that signs thinking blocks and reasoning items handed to clients. Kept in the user's ft
    cache dir (mode 0600) so that signatures stay valid across restarts; made on first use."""
    from ft_core.paths import cache_dir

    path = cache_dir() / "server-secret"
    try:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    except OSError:
        pass
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        os.replace(tmp, path)
        key = path.read_bytes()  # another server may have raced us: use the key that is on disk
    except OSError as e:  # a read-only home: signatures then last as long as this process
        log.warning(
            "cannot keep the signing key in %s (%s); signatures will not survive a restart", path, e
        )
    return key


def build_app(engine, config: ServerConfig) -> Starlette:
    """The ASGI app serving ``engine``; the engine thread starts and stops with the app's lifespan."""
    if not config.secret:
        from dataclasses import replace

        config = replace(config, secret=server_secret())
    loop = EngineLoop(
        engine,
        config.max_running_requests,
        config.max_waiting_requests,
        config.engine_stall_seconds,
    )
    metrics = Metrics(loop, config.model_name)

    elastic = ElasticLoop(loop, config)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loop.start()
        task = elastic.start()
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            loop.stop()

    routes = [
        Route("/", _root, methods=["GET", "HEAD"]),
        Route("/health", _health, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
        _api_route("/v1/models", models.list_models, method="GET"),
        _api_route("/v1/chat/completions", openai_chat.chat_completions),
        _api_route("/v1/completions", openai_completions.completions),
        _api_route("/v1/responses", openai_responses.responses),
        _api_route("/v1/responses/compact", openai_responses.compact),
        _api_route("/v1/messages", anthropic_messages.messages),
        _api_route("/v1/messages/count_tokens", anthropic_messages.count_tokens),
        _api_route("/v1/admin/memory", admin.get_memory, auth="admin", method="GET"),
        _api_route("/v1/admin/memory", admin.post_memory, auth="admin"),
    ]
    guard = Middleware(Guard, rules=GuardRules.from_config(config))  # browser rules (guard.py)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[guard],
        exception_handlers={404: _not_found, 405: _method_not_allowed},
    )
    app.state.config, app.state.loop, app.state.metrics = config, loop, metrics
    app.state.elastic_view = elastic.view
    app.state.service = Service(loop, config, metrics)
    return app
