"""GET /v1/models: the one served model, with its context length (agents size their windows from it)."""

from __future__ import annotations

import time

_CREATED = int(time.time())


async def list_models(app, request, body: dict):
    svc = app.state.service
    name = svc.config.model_name
    return {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": _CREATED,
                "owned_by": "ft",
                "max_model_len": svc.max_model_len,
                "context_length": svc.max_model_len,
                # Anthropic's /v1/models shape, for clients that read it
                "type": "model",
                "display_name": name,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_CREATED)),
            }
        ],
    }
