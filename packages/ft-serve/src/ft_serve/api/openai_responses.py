"""POST /v1/responses and /v1/responses/compact: the OpenAI Responses API (DESIGN §6: Codex).

Stateless: the full conversation comes in ``input`` every time (Codex sends ``store: false``).
``store: true`` is accepted but nothing is kept, so ``previous_response_id`` / ``conversation`` are
refused with a 400 that says so. Input items and tools: see ``responses_items``; output items and
stream events: see ``responses_output``. Accepted and echoed: metadata, prompt_cache_key,
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
import json
import time
from dataclasses import dataclass

from ft_serve.api.fields import choice, field, name_of, number
from ft_serve.api.openai_chat import EFFORTS, check_room, sampling
from ft_serve.api.responses_items import (
    ToolMap,
    build_tools,
    content_text,
    convert_input,
    flat_name,
)
from ft_serve.api.responses_output import OutputBuilder, new_id
from ft_serve.api.signing import seal
from ft_serve.api.sse import run_to_end, stream
from ft_serve.parsers import collect
from ft_serve.server.errors import ApiError, bad_request
from ft_serve.server.service import ChatRequest, check_api_error

COMPACT_MAX_TOKENS = 4096
# the values of ``include`` (openai-python ``ResponseIncludable``)
INCLUDABLE = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
COMPACT_PROMPT = (
    "Context compaction: the conversation above will be replaced by a summary so that the work can continue in a "
    "fresh context window. Write that summary now for whoever continues the task: the user's goals, requirements "
    "and preferences; the state of the work (files created or changed, commands run and what they showed, decisions "
    "and their reasons); open problems; and the concrete next steps. Be specific (paths, names, values) and brief. "
    "Reply with the summary only and do not call tools."
)
_REFUSED = {
    "previous_response_id": "this server stores no responses; send the whole conversation in 'input'",
    "conversation": "this server stores no conversations; send the whole conversation in 'input'",
    "prompt": "stored prompt templates are not supported; send 'instructions' and 'input'",
}


@dataclass
class Parsed:
    chat: ChatRequest
    tools: ToolMap
    echo: dict  # request fields echoed in the response object
    stream: bool
    builder_opts: dict
    compaction: bool


def parse(svc, body: dict, *, compaction: bool = False) -> Parsed:
    for key, why in _REFUSED.items():
        if body.get(key) is not None:
            raise bad_request(f"'{key}' is not supported: {why}", key)
    if field(body, "background", bool, False):
        raise bad_request("'background' responses are not supported; stream instead", "background")
    items = body.get("input")
    if (
        isinstance(items, list)
        and items
        and isinstance(items[-1], dict)
        and items[-1].get("type") == "compaction_trigger"
    ):
        compaction, body = True, {**body, "input": items[:-1]}
    tools = build_tools(body.get("tools"))
    tc = tool_choice_of(body.get("tool_choice"))
    reasoning = field(body, "reasoning", dict, {}) or {}
    effort = choice(reasoning, "effort", EFFORTS, None, "reasoning.effort")
    summary = choice(
        reasoning, "summary", ("auto", "concise", "detailed", "none"), None, "reasoning.summary"
    ) or choice(
        reasoning,
        "generate_summary",
        ("auto", "concise", "detailed", "none"),
        None,
        "reasoning.generate_summary",
    )
    include = field(body, "include", list, []) or []
    for i, v in enumerate(include):
        if v not in INCLUDABLE:
            raise bad_request(
                f"'include[{i}]' must be one of {', '.join(INCLUDABLE)}, got {v!r}", f"include[{i}]"
            )
    metadata = field(body, "metadata", dict, {}) or {}
    text = field(body, "text", dict, {}) or {}
    fmt = field(text, "format", dict, {"type": "text"}, path="text.format") or {"type": "text"}
    choice(fmt, "type", ("text", "json_object", "json_schema"), "text", "text.format.type")
    schema = schema_of(fmt)  # checked for compaction too, which answers in plain text
    foreign = None if svc.metrics is None else lambda kind: svc.metrics.foreign("responses", kind)
    messages = convert_input(body, svc.config.secret, foreign)
    if fmt.get("type") != "text":
        _format_note(messages, fmt)
    kwargs = {"reasoning_effort": effort} if effort else {}
    number(body, "max_output_tokens", None, 16, integer=True)  # OpenAI's least
    params = sampling(
        body,
        ("max_output_tokens",),
        min(svc.default_max_tokens, COMPACT_MAX_TOKENS) if compaction else svc.default_max_tokens,
        svc.max_model_len,
    )
    if compaction:
        _check_choice(tc, tools)  # checked as for a response, then not used:
        messages = messages + [{"role": "user", "content": COMPACT_PROMPT}]
        tc = "auto"  # the same tools as the turns before, so the prompt's prefix stays cached
    chat = ChatRequest(
        messages,
        params,
        tools.template or None,
        tc,
        False if effort == "none" or compaction else None,
        kwargs,
        json_schema=schema if not compaction else None,
        parallel_tool_calls=field(body, "parallel_tool_calls", bool, True),
    )
    max_calls = number(body, "max_tool_calls", None, 0, integer=True)
    parallel = field(body, "parallel_tool_calls", bool, True)
    echo = {
        "model": field(body, "model", str, svc.config.model_name),
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": parallel,
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": max_calls,
        "store": field(body, "store", bool, True),
        "text": {**text, "format": fmt},
        "reasoning": {"effort": effort, "summary": summary},
        "metadata": metadata,
        "user": body.get("user"),
        "service_tier": body.get("service_tier") or "default",
        "truncation": body.get("truncation") or "disabled",
        "prompt_cache_key": body.get("prompt_cache_key"),
        "safety_identifier": body.get("safety_identifier"),
        "previous_response_id": None,
        "background": False,
        "top_logprobs": 0,
    }
    opts = {
        "summary": summary in ("auto", "concise", "detailed"),
        "encrypted": "reasoning.encrypted_content" in include,
        "max_calls": 1 if not parallel else max_calls,
    }
    return Parsed(chat, tools, echo, field(body, "stream", bool, False), opts, compaction)


def tool_choice_of(tc):
    if tc is None or tc in ("auto", "none", "required"):
        return tc or "auto"
    if isinstance(tc, dict):
        t = tc.get("type")
        if t in ("function", "custom") and isinstance(tc.get("name"), str):
            ns = tc.get("namespace") if isinstance(tc.get("namespace"), str) else None
            return {"name": flat_name(ns, tc["name"])}
        if t == "allowed_tools" and tc.get("mode", "auto") in ("auto", "required"):
            return tc.get("mode", "auto")
    raise bad_request(
        "'tool_choice' must be 'auto', 'none', 'required', {\"type\": \"function\", \"name\": ...} or "
        '{"type": "allowed_tools", "mode": ...}; hosted tools do not run on this server',
        "tool_choice",
    )


def _check_choice(tc, tools: ToolMap) -> None:
    """The checks the service makes of a response's ``tool_choice``, for a compaction (which then
    lets the model answer in text)."""
    if tc not in ("auto", "none") and not tools.template:
        raise bad_request("tool_choice requires tools", "tool_choice")
    if isinstance(tc, dict) and tc["name"] not in tools.kinds:
        raise bad_request(
            f"tool_choice names {tc['name']!r}, which is not among the tools", "tool_choice"
        )


def schema_of(fmt: dict) -> dict | None:
    """The JSON schema a ``text.format`` asks for ({} = any JSON object), or None for plain text."""
    if fmt.get("type") == "json_schema":
        name_of(fmt, "name", "text.format.name")
        sch = fmt.get("schema")
        if not isinstance(sch, dict):
            raise bad_request(
                "'text.format.schema' must be a JSON schema object", "text.format.schema"
            )
        return sch
    return {} if fmt.get("type") == "json_object" else None


def _format_note(messages: list[dict], fmt: dict) -> None:
    note = "Answer with one JSON object and nothing else."
    if fmt.get("type") == "json_schema" and fmt.get("schema") is not None:
        note = f"Answer with one JSON value that matches this JSON schema, and nothing else:\n{json.dumps(fmt['schema'])}"
    if messages[0]["role"] == "system":
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{note}".strip()}
    else:
        messages.insert(0, {"role": "system", "content": note})


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
