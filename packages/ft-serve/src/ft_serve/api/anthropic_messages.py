"""POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages (DESIGN §6: Claude Code).

Request -> one ChatRequest:
  system (string or text blocks) and the leading ``role: "system"`` messages -> one system message
  (a block starting ``x-anthropic-billing-header:`` is dropped: it changes per conversation and would
  break prefix reuse); later system messages stay in place. User blocks: text (and text documents) ->
  one user message after the ``tool`` messages its tool_result blocks become, in order. Assistant
  blocks: thinking -> reasoning_content, tool_use -> tool_calls. A thinking block signed elsewhere
  (Anthropic, another server, a former secret: a session moved here) is foreign: its text is kept
  the same way, and counted (``ft_foreign_reasoning_total``); redacted_thinking (Anthropic's
  encrypted thinking) is dropped and counted; a signature that names this server's key id but does
  not match its text (altered) -> 400. Images and other media -> 400 (text-only models).
  tools: custom tools (no ``type`` or ``"custom"``); server tools (web_search_*, code_execution_*, ...)
  are ignored: this server cannot run them and Claude Code sends some unasked.
  tool_choice auto|any|tool|none (+ disable_parallel_tool_use). stop_sequences, temperature, top_p,
  top_k. thinking enabled|adaptive -> thinking on; disabled or absent -> off, and any reasoning the
  model still emits is dropped from the response (Anthropic returns thinking only when asked).
  output_config.effort -> the template's ``reasoning_effort``; output_config.format {type: json_schema,
  schema} is enforced by constrained decoding (server/structured.py).
  Accepted and ignored: metadata, cache_control, context_management, service_tier, container,
  mcp_servers, speed and any unknown top-level field.
"""

from __future__ import annotations

import uuid

from ft_core import SamplingParams
from ft_core.errors import RequestError

from ft_serve.api.anthropic_blocks import BlockWriter, message_body, stream_message, thinking_origin
from ft_serve.api.anthropic_tools import convert_tools, tool_choice_of
from ft_serve.api.fields import choice, field, number, stop_list
from ft_serve.api.openai_chat import sampling_error
from ft_serve.api.sse import run_to_end, stream
from ft_serve.server.errors import ApiError, bad_request
from ft_serve.server.service import ChatRequest, check_api_error

BILLING_HEADER = "x-anthropic-billing-header:"
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "max": "high", "xhigh": "high"}


async def messages(app, request, body: dict):
    svc = app.state.service
    req, one_call = chat_request(body, svc, count_only=False)
    model = field(body, "model", str, svc.config.model_name)
    streamed = field(body, "stream", bool, False)
    try:
        gen = await svc.start_chat(req)
    except ApiError as e:
        if not hasattr(e, "tokens"):  # only a ContextLengthError carries the prompt's length
            raise
        # Claude Code recognises this wording (it offers to compact the conversation)
        raise bad_request(
            f"prompt is too long: {e.tokens} tokens > {svc.max_model_len - 1} maximum", None, e.code
        ) from None
    writer = BlockWriter(svc.config.secret, bool(req.thinking), one_call)
    mid = "msg_" + uuid.uuid4().hex[:24]
    if streamed:
        return stream(stream_message(gen, writer, mid, model))
    events = await run_to_end(gen, request)
    check_api_error(gen)
    for ev in events:
        writer.feed(ev)
    writer.close()
    return message_body(mid, model, writer.content(gen.tool_calls), gen, writer)


async def count_tokens(app, request, body: dict):
    svc = app.state.service
    req, _ = chat_request(body, svc, count_only=True)
    return {"input_tokens": await svc.count_tokens(req)}


def chat_request(body: dict, svc, count_only: bool) -> tuple[ChatRequest, bool]:
    """(the ChatRequest, keep only the first tool call). Raises a 400 naming the bad field."""
    field(body, "model", str, required=True)  # any name is served (README: Serving)
    foreign = (
        None
        if count_only or svc.metrics is None
        else lambda kind: svc.metrics.foreign("anthropic", kind)
    )
    msgs = convert_messages(body.get("messages"), svc.config.secret, foreign)
    system = system_text(body.get("system"))
    lead = []
    while msgs and msgs[0]["role"] == "system":
        lead.append(msgs.pop(0)["content"])
    system = "\n\n".join(s for s in [system, *lead] if s)
    if system:
        msgs.insert(0, {"role": "system", "content": system})
    tc, one_call = tool_choice_of(body.get("tool_choice"))
    thinking = thinking_of(body.get("thinking"), None if count_only else body.get("max_tokens"))
    kwargs = {}
    oc = field(body, "output_config", dict, {})
    schema = None
    fmt = field(oc, "format", dict, None, path="output_config.format")
    if fmt is not None:
        choice(fmt, "type", ("json_schema",), path="output_config.format.type")
        schema = field(fmt, "schema", dict, required=True, path="output_config.format.schema")
    effort = field(oc, "effort", str, None, path="output_config.effort")
    if effort in _EFFORT:  # an effort level this server does not know is ignored
        kwargs["reasoning_effort"] = _EFFORT[effort]
    field(body, "metadata", dict, None)
    params = SamplingParams() if count_only else sampling(body, svc.max_model_len)
    return ChatRequest(
        msgs,
        params,
        convert_tools(body.get("tools")),
        tc,
        thinking,
        kwargs,
        json_schema=schema,
        parallel_tool_calls=not one_call,
    ), one_call


def sampling(body: dict, limit: int) -> SamplingParams:
    """``limit``: the context length, the most ``max_tokens`` may be (a prompt plus ``max_tokens``
    past it is accepted, as by Anthropic's newer models: the output stops at the context's end)."""
    mx = number(body, "max_tokens", None, 1, integer=True) or _missing("max_tokens")
    if mx > limit:
        raise bad_request(
            f"max_tokens: {mx} > {limit}, the most this model can generate (its context length)",
            "max_tokens",
        )
    try:
        return SamplingParams(
            max_tokens=mx,
            temperature=number(body, "temperature", 1.0, 0, 1),
            top_p=number(body, "top_p", 1.0, 0, 1) or 1e-9,
            top_k=number(body, "top_k", 0, 0, integer=True),
            stop=stop_list(body, "stop_sequences", one_string=False),
            ignore_eos=bool(field(body, "ignore_eos", bool, False)),
        )
    except RequestError as e:
        raise sampling_error(e) from None


def _missing(name: str):
    raise bad_request(f"'{name}' is required", name)


def system_text(v) -> str:
    if v is None or isinstance(v, str):
        return v or ""
    if not isinstance(v, list):
        raise bad_request("'system' must be a string or an array of text blocks", "system")
    parts = [block_text(b, f"system[{i}]", ("text",)) for i, b in enumerate(v)]
    return "\n\n".join(p for p in parts if p and not p.startswith(BILLING_HEADER))


def block_text(b, p: str, allowed: tuple[str, ...] = ("text", "document")) -> str:
    """The text of a text block (or a plain-text document); other block types -> 400."""
    if not isinstance(b, dict):
        raise bad_request(f"'{p}' must be a content block object", p)
    t = b.get("type")
    if t == "text" and "text" in allowed:
        return field(b, "text", str, required=True, path=f"{p}.text")
    if t == "document" and "document" in allowed:
        src = field(b, "source", dict, required=True, path=f"{p}.source")
        if src.get("type") == "text":
            return field(src, "data", str, required=True, path=f"{p}.source.data")
        if src.get("type") == "content":
            c = src.get("content")
            return c if isinstance(c, str) else blocks_text(c, f"{p}.source.content", ("text",))
        raise bad_request(
            f"'{p}': only plain-text documents are supported by this text-only model", p
        )
    if t in ("image", "document", "search_result", "container_upload"):
        raise bad_request(
            f"'{p}': content of type {t!r} is not supported by this text-only model", p
        )
    raise bad_request(f"'{p}.type' {t!r} is not a supported content block type here", f"{p}.type")


def blocks_text(v, p: str, allowed: tuple[str, ...] = ("text", "document"), sep: str = "\n") -> str:
    if v is None or isinstance(v, str):
        return v or ""
    if not isinstance(v, list):
        raise bad_request(f"'{p}' must be a string or an array of content blocks", p)
    return sep.join(block_text(b, f"{p}[{i}]", allowed) for i, b in enumerate(v))


def convert_messages(msgs, secret: bytes, foreign=None) -> list[dict]:
    """Anthropic messages -> template messages. ``foreign(kind)`` is called for each thinking block
    signed elsewhere ("thinking") and each redacted_thinking block ("redacted_thinking")."""
    if not isinstance(msgs, list) or not msgs:
        raise bad_request("'messages' must be a non-empty array", "messages")
    out: list[dict] = []
    names: dict[str, str] = {}  # tool_use id -> tool name (for the tool messages)
    for i, m in enumerate(msgs):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad_request(f"'{p}' must be an object", p)
        role = choice(m, "role", ("user", "assistant", "system"), path=f"{p}.role") or _missing(
            f"{p}.role"
        )
        content = m.get("content")
        if content is None:
            _missing(f"{p}.content")
        if not isinstance(content, (str, list)):
            raise bad_request(
                f"'{p}.content' must be a string or an array of content blocks", f"{p}.content"
            )
        if not content and role != "assistant":  # (an empty assistant turn is let through: README)
            raise bad_request(
                f"{p}.content: user and system messages must have non-empty content", f"{p}.content"
            )
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if role == "system":
            out.append(
                {
                    "role": "system",
                    "content": blocks_text(content, f"{p}.content", ("text",), "\n\n"),
                }
            )
        elif role == "user":
            out += _user(blocks, f"{p}.content", names)
        else:
            out.append(_assistant(blocks, f"{p}.content", secret, names, foreign or _ignore))
    return out


def _user(blocks: list, p: str, names: dict) -> list[dict]:
    tools, texts = [], []
    for j, b in enumerate(blocks):
        q = f"{p}[{j}]"
        if isinstance(b, dict) and b.get("type") == "tool_result":
            tid = field(b, "tool_use_id", str, required=True, path=f"{q}.tool_use_id")
            msg = {
                "role": "tool",
                "content": blocks_text(b.get("content"), f"{q}.content"),
                "tool_call_id": tid,
            }
            field(b, "is_error", bool, False, path=f"{q}.is_error")
            if tid in names:
                msg["name"] = names[tid]
            tools.append(msg)
        else:
            texts.append(block_text(b, q))
    return tools + ([{"role": "user", "content": "\n".join(texts)}] if texts or not tools else [])


def _ignore(kind: str) -> None:
    pass


def _assistant(blocks: list, p: str, secret: bytes, names: dict, foreign) -> dict:
    texts, reasoning, calls = [], [], []
    for j, b in enumerate(blocks):
        q = f"{p}[{j}]"
        t = b.get("type") if isinstance(b, dict) else None
        if t == "thinking":
            text = field(b, "thinking", str, required=True, path=f"{q}.thinking")
            sig = field(b, "signature", str, required=True, path=f"{q}.signature")
            origin = thinking_origin(secret, text, sig)
            if origin == "altered":
                raise bad_request(
                    f"'{q}.signature': invalid signature in thinking block (thinking blocks must be "
                    "passed back exactly as this server returned them)",
                    f"{q}.signature",
                )
            if origin == "foreign":
                foreign("thinking")
            if text:
                reasoning.append(text)
        elif t == "redacted_thinking":
            field(b, "data", str, required=True, path=f"{q}.data")
            foreign("redacted_thinking")
        elif t == "tool_use":
            tid = field(b, "id", str, required=True, path=f"{q}.id")
            name = field(b, "name", str, required=True, path=f"{q}.name")
            args = field(b, "input", dict, {}, path=f"{q}.input")
            names[tid] = name
            calls.append(
                {"id": tid, "type": "function", "function": {"name": name, "arguments": args}}
            )
        else:
            texts.append(block_text(b, q, ("text",)))
    msg = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        msg["reasoning_content"] = "\n".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg


def thinking_of(v, max_tokens=None) -> bool:
    """enabled / adaptive -> True; disabled or absent -> False (Anthropic thinks only when asked).
    An enabled budget is >= 1024 and below ``max_tokens`` (when known), as Anthropic requires."""
    if v is None:
        return False
    if not isinstance(v, dict):
        raise bad_request('\'thinking\' must be an object such as {"type": "adaptive"}', "thinking")
    t = choice(v, "type", ("enabled", "adaptive", "disabled"), path="thinking.type") or _missing(
        "thinking.type"
    )
    if t == "enabled":
        b = number(v, "budget_tokens", None, 1024, integer=True, path="thinking.budget_tokens")
        if b is None:
            _missing("thinking.budget_tokens")
        if isinstance(max_tokens, int) and b >= max_tokens:
            raise bad_request(
                f"thinking.budget_tokens: {b} must be less than max_tokens ({max_tokens})",
                "thinking.budget_tokens",
            )
    return t != "disabled"
