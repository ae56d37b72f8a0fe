"""POST /v1/responses and /v1/responses/compact: the OpenAI Responses API (DESIGN §6: Codex).

Stateless: the full conversation comes in ``input`` every time (Codex sends ``store: false``).
``store: true`` is accepted but nothing is kept, so ``previous_response_id`` / ``conversation`` are
refused with a 400 that says so. The body is read by ``responses_request``; tools: see
``responses_tools``; input items: ``responses_items``; output items and stream events:
``responses_output``. Accepted and echoed: metadata, prompt_cache_key,
service_tier, user, safety_identifier, truncation (over-long input is a 400, never truncated),
text.verbosity. ``text.format`` json_object / json_schema is enforced by constrained decoding
(server/structured.py); the schema is also put into the system text so the model knows it.

Compaction, both of Codex's remote forms: ``/v1/responses/compact`` (input items in; out: the
user messages kept + one ``compaction`` item) and a ``compaction_trigger`` as the last input item of
``/v1/responses`` (out: one ``compaction`` item). The model writes a summary of the conversation;
the item's ``encrypted_content`` carries it signed, and it comes back as a user message on later turns.
"""

from __future__ import annotations

import asyncio
import time

from ft_serve.api.fields import field
from ft_serve.api.openai_chat import check_room
from ft_serve.api.responses_items import content_text
from ft_serve.api.responses_request import parse
from ft_serve.api.responses_output import OutputBuilder, new_id
from ft_serve.api.signing import seal
from ft_serve.api.sse import run_to_end, stream
from ft_serve.parsers import collect
from ft_serve.server.errors import ApiError
from ft_serve.server.service import ChatRequest, check_api_error


async def _start(svc, chat: ChatRequest):
    try:
        return await svc.start_chat(chat)
    except ApiError as e:
        if e.param == "messages":
            e.param = "input"
        raise


def usage_of(gen) -> dict:
    return {
        "input_tokens": gen.prompt_tokens,
        "input_tokens_details": {"cached_tokens": gen.cached_tokens},
        "output_tokens": gen.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": gen.reasoning_tokens},
        "total_tokens": gen.prompt_tokens + gen.completion_tokens,
    }


def _shell(rid: str, created: int, echo: dict) -> dict:
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
        **echo,
    }


def _final(shell: dict, output: list[dict], gen) -> tuple[str, dict]:
    """(terminal event name, the finished response object)."""
    r = {**shell, "output": output, "usage": usage_of(gen), "completed_at": int(time.time())}
    if gen.finish_reason == "error":
        r.update(
            status="failed",
            error={"code": "server_error", "message": gen.error or "generation failed"},
        )
        return "response.failed", r
    if gen.finish_reason == "length":
        r.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
        return "response.incomplete", r
    r["status"] = "completed"
    return "response.completed", r


# ---- POST /v1/responses -------------------------------------------------------------------------
async def responses(app, request, body: dict):
    svc = app.state.service
    p = parse(svc, body)
    gen = await _start(svc, p.chat)
    check_room(gen, body, ("max_output_tokens",), svc.max_model_len)
    shell = _shell(new_id("resp"), int(time.time()), p.echo)
    b = OutputBuilder(p.tools, svc.config.secret, **p.builder_opts)
    if p.compaction:
        return (
            stream(_compaction_stream(gen, b, shell, svc.config.secret))
            if p.stream
            else await _compaction_json(gen, request, shell, svc.config.secret)
        )
    if p.stream:
        return stream(_stream(gen, b, shell))
    for ev in await run_to_end(gen, request):
        b.feed(ev)
    check_api_error(gen)
    b.finish("incomplete" if gen.finish_reason == "length" else "completed")
    return _final(shell, b.output, gen)[1]


async def _stream(gen, b: OutputBuilder, shell: dict):
    yield b.event("response.created", response=shell)
    yield b.event("response.in_progress", response=shell)
    async for ev in gen:
        for s in b.feed(ev):
            yield s
    for s in b.finish("incomplete" if gen.finish_reason == "length" else "completed"):
        yield s
    name, r = _final(shell, b.output, gen)
    yield b.event(name, response=r)


# ---- compaction ---------------------------------------------------------------------------------
def _summary(events) -> str:
    out = collect(events)
    return out.content.strip() or out.reasoning.strip()


def _compaction_item(secret: bytes, text: str, item_id: str | None = None) -> dict:
    return {
        "type": "compaction",
        "id": item_id or new_id("cmp"),
        "encrypted_content": seal(secret, "compaction", text),
    }


async def _compaction_json(gen, request, shell: dict, secret: bytes) -> dict:
    events = await run_to_end(gen, request)
    check_api_error(gen)
    r = _final(shell, [_compaction_item(secret, _summary(events))], gen)[1]
    return {**r, "status": "completed", "incomplete_details": None}


async def _compaction_stream(gen, b: OutputBuilder, shell: dict, secret: bytes):
    yield b.event("response.created", response=shell)
    yield b.event("response.in_progress", response=shell)
    item_id, events, last = new_id("cmp"), [], 0.0
    yield b.event(
        "response.output_item.added",
        output_index=0,
        item={"type": "compaction", "id": item_id, "encrypted_content": ""},
    )
    async for ev in gen:
        events.append(ev)
        if (
            time.monotonic() - last > 1.0
        ):  # keeps the client's idle timer alive; carries no summary text
            last = time.monotonic()
            yield b.event("response.compaction.compacting", item_id=item_id, output_index=0)
    item = _compaction_item(secret, _summary(events), item_id)
    if gen.finish_reason != "error":
        yield b.event("response.output_item.done", output_index=0, item=item)
    name, r = _final(shell, [item] if gen.finish_reason != "error" else [], gen)
    if name == "response.incomplete":  # a summary cut at the token limit is still a summary
        name, r = "response.completed", {**r, "status": "completed", "incomplete_details": None}
    yield b.event(name, response=r)


async def compact(app, request, body: dict):
    """POST /v1/responses/compact: {model, input, instructions, tools?} -> {object: "response.compaction",
    output: [the user messages kept, newest within a quarter of the context] + [one compaction item], usage}."""
    svc = app.state.service
    field(body, "model", str, required=True)  # any name is served (README: Serving)
    field(body, "stream", bool, False)  # checked; the compaction is answered whole either way
    p = parse(svc, {**body, "stream": False}, compaction=True)
    gen = await _start(svc, p.chat)
    check_room(gen, body, ("max_output_tokens",), svc.max_model_len)
    events = await run_to_end(gen, request)
    check_api_error(gen)
    kept = await asyncio.to_thread(
        _kept_user_messages, svc, body.get("input"), svc.max_model_len // 4
    )
    return {
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": kept + [_compaction_item(svc.config.secret, _summary(events))],
        "usage": usage_of(gen),
    }


def _kept_user_messages(svc, items, budget: int) -> list[dict]:
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    kept: list[dict] = []
    for i in range(len(items) - 1, -1, -1):
        it = items[i]
        if not (
            isinstance(it, dict)
            and it.get("type", "message") == "message"
            and it.get("role") == "user"
        ):
            continue
        text = content_text(it.get("content"), f"input[{i}].content")
        budget -= len(svc.engine.tokenizer.encode(text, add_special_tokens=False))
        if budget < 0:
            break
        kept.append(
            {
                "type": "message",
                "id": new_id("msg"),
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_text", "text": text}],
            }
        )
    return kept[::-1]
