"""Responses API input items -> template messages (tools: responses_tools.py), and the signed
tokens in ``encrypted_content`` (``seal`` / ``unseal`` / ``foreign_text``: api/signing.py)."""

from __future__ import annotations

import logging

from ft_serve.api.fields import field
from ft_serve.api.responses_tools import flat_name
from ft_serve.api.signing import foreign_text, unseal
from ft_serve.server.errors import bad_request
from ft_serve.server.service import parse_arguments

# Input items that carry nothing a text model can read (results of hosted tools): skipped.
SKIPPED_ITEMS = (
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "tool_search_call",
    "tool_search_output",
    "mcp_list_tools",
    "ghost_snapshot",
    "other",
)
log = logging.getLogger("ft.serve")
SUMMARY_PREFIX = "A summary of the earlier part of this conversation, which was compacted:\n\n"
_IMAGE_NOTE = "[an image was attached here; this model reads only text]"


def content_text(content, path: str, images_ok: bool = False) -> str:
    """Message or tool-output content as text: a string or an array of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise bad_request(f"'{path}' must be a string or an array of content parts", path)
    out = []
    for i, part in enumerate(content):
        p = f"{path}[{i}]"
        t = part.get("type") if isinstance(part, dict) else None
        if t in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            out.append(field(part, "text", str, "", path=f"{p}.text"))
        elif t == "refusal":
            out.append(field(part, "refusal", str, "", path=f"{p}.refusal"))
        elif t in ("input_image", "input_file", "input_audio") and images_ok:
            out.append(_IMAGE_NOTE)
        elif t in ("input_image", "input_file", "input_audio"):
            raise bad_request(
                f"'{p}': content of type {t!r} is not supported by this text-only model", p
            )
        else:
            raise bad_request(f"'{p}.type' {t!r} is not a known content part type", f"{p}.type")
    return "".join(out)


class _Messages:
    """Accumulates template messages; consecutive assistant-side items merge into one assistant turn."""

    def __init__(self, foreign=None):
        self.out: list[dict] = []
        self.reasoning: list[str] = []  # reasoning waiting for the assistant output that follows it
        self.foreign = foreign or (lambda kind: None)  # called with "reasoning" | "compaction"

    def add(self, role: str, content: str, **extra) -> None:
        self.reasoning = []  # reasoning followed by no assistant output is dropped
        self.out.append({"role": role, "content": content, **extra})

    def assistant(self) -> dict:
        last = self.out[-1] if self.out else None
        if self.reasoning or last is None or last["role"] != "assistant":
            msg = {"role": "assistant", "content": ""}
            if self.reasoning:
                msg["reasoning_content"] = "\n\n".join(self.reasoning)
            self.reasoning = []
            self.out.append(msg)
            return msg
        return last

    def assistant_text(self, text: str) -> None:
        msg = self.assistant()
        if msg.get("tool_calls"):
            msg = {"role": "assistant", "content": ""}
            self.out.append(msg)
        msg["content"] = (
            f"{msg['content']}\n\n{text}" if msg["content"] and text else (msg["content"] or text)
        )

    def call(self, call_id: str, name: str, arguments) -> None:
        self.assistant().setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )


def convert_input(body: dict, secret: bytes, foreign=None) -> list[dict]:
    """``instructions`` + ``input`` as chat-template messages (leading system/developer text
    merged). ``foreign(kind)`` is called for each reasoning or compaction item whose token is
    foreign."""
    m = _Messages(foreign)
    instructions = field(body, "instructions", str, "")
    if instructions:
        m.add("system", instructions)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad_request("'input' must be a non-empty string or array of items", "input")
    for i, item in enumerate(items):
        _item(m, item, f"input[{i}]", secret)
    out = m.out
    k = 0
    while k < len(out) and out[k]["role"] == "system":
        k += 1
    if k > 1:
        out = [
            {
                "role": "system",
                "content": "\n\n".join(x["content"] for x in out[:k] if x["content"]),
            }
        ] + out[k:]
    if not out:
        raise bad_request("'input' holds nothing this model can read", "input")
    return out


def _item(m: _Messages, item, p: str, secret: bytes) -> None:
    if not isinstance(item, dict):
        raise bad_request(f"'{p}' must be an object", p)
    t = field(item, "type", str, "message" if "role" in item else None, path=f"{p}.type")
    if t is None:
        raise bad_request(f"'{p}.type' is required", f"{p}.type")
    if t == "message":
        role = field(item, "role", str, required=True, path=f"{p}.role")
        if role not in ("user", "assistant", "system", "developer"):
            raise bad_request(
                f"'{p}.role' must be 'user', 'assistant', 'system' or 'developer', got {role!r}",
                f"{p}.role",
            )
        text = content_text(item.get("content"), f"{p}.content")
        if role == "assistant":
            m.assistant_text(text)
        else:
            m.add("system" if role == "developer" else role, text)
    elif t == "reasoning":
        text = None
        if item.get("encrypted_content"):
            text = unseal(secret, item["encrypted_content"], "reasoning", f"{p}.encrypted_content")
            if text is None:  # OpenAI's or another server's: its plain text stands in, if any
                m.foreign("reasoning")
                text = foreign_text(item["encrypted_content"], "reasoning")
        if text is None:
            text = content_text(item.get("content"), f"{p}.content") or content_text(
                item.get("summary"), f"{p}.summary"
            )
        if text:
            m.reasoning.append(text)
    elif t in ("function_call", "custom_tool_call"):
        call_id = field(item, "call_id", str, required=True, path=f"{p}.call_id")
        name = flat_name(
            field(item, "namespace", str, None, path=f"{p}.namespace"),
            field(item, "name", str, required=True, path=f"{p}.name"),
        )
        if t == "function_call":
            m.call(
                call_id,
                name,
                parse_arguments(field(item, "arguments", str, "{}", path=f"{p}.arguments")),
            )
        else:
            m.call(call_id, name, {"input": field(item, "input", str, "", path=f"{p}.input")})
    elif t == "local_shell_call":
        action = field(item, "action", dict, required=True, path=f"{p}.action")
        args = {
            "command": field(action, "command", list, required=True, path=f"{p}.action.command")
        }
        if action.get("working_directory"):
            args["workdir"] = action["working_directory"]
        if action.get("timeout_ms"):
            args["timeout_ms"] = action["timeout_ms"]
        m.call(
            field(item, "call_id", str, None, path=f"{p}.call_id")
            or field(item, "id", str, "", path=f"{p}.id"),
            "local_shell",
            args,
        )
    elif t in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        call_id = field(item, "call_id", str, None, path=f"{p}.call_id") or field(
            item, "id", str, None, path=f"{p}.id"
        )
        if call_id is None:
            raise bad_request(f"'{p}.call_id' is required", f"{p}.call_id")
        output = item.get("output")
        if output is not None and not isinstance(output, (str, list)):
            raise bad_request(
                f"'{p}.output' must be a string or an array of content parts", f"{p}.output"
            )
        m.add("tool", content_text(output, f"{p}.output", images_ok=True), tool_call_id=call_id)
    elif t in ("compaction", "compaction_summary"):
        token = item.get("encrypted_content")
        text = unseal(secret, token, "compaction", f"{p}.encrypted_content")
        if text is None:
            m.foreign("compaction")
            text = foreign_text(token, "compaction")  # another ft server's summary is readable
        if text is None:
            log.info(
                "%s: a compaction item this server did not issue; its summary cannot be "
                "read and is left out of the prompt",
                p,
            )
        else:
            m.add("user", SUMMARY_PREFIX + text)
    elif t == "compaction_trigger":
        raise bad_request(f"'{p}': a compaction_trigger must be the last input item", p)
    elif t == "item_reference":
        raise bad_request(
            f"'{p}': item references are not supported; this server stores nothing, so send the "
            "items themselves",
            p,
        )
    elif t not in SKIPPED_ITEMS:
        raise bad_request(
            f"'{p}.type' {t!r} is not an input item type this server supports", f"{p}.type"
        )
