"""Responses API input side: tools -> template tools (``ToolMap``), input items -> template messages,
and the signed tokens in ``encrypted_content`` (made and read in api/signing.py).

Tools. ``function`` tools pass through; a ``namespace`` tool's members become flat template tools
named ``<namespace>__<name>`` (Codex's own flattening: stray underscores around the joint trimmed)
and the model's calls to them come back as ``function_call`` items with ``name`` and ``namespace``
split again. ``custom`` (free-form) tools become functions with one string parameter ``input`` and
come back as ``custom_tool_call``; ``local_shell`` becomes a function ``local_shell`` and comes back
as ``local_shell_call``. Hosted tools this server cannot run (web_search, file_search, image_generation,
code_interpreter, computer_use, mcp, tool_search, ...) are dropped from the prompt (echoed only);
a type the Responses API does not have is a 400.

Tokens: ``seal`` / ``unseal`` / ``foreign_text`` (api/signing.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from dataclasses import field as dc_field

from ft_serve.api.fields import field, name_of, object_schema
from ft_serve.api.signing import foreign_text, unseal
from ft_serve.server.errors import bad_request
from ft_serve.server.service import parse_arguments

# Input items that carry nothing a text model can read (results of hosted tools): skipped.
# Tool types of the Responses API that run on OpenAI's side (openai-python ``ToolParam``).
HOSTED_TOOLS = (
    "file_search",
    "computer",
    "computer_use_preview",
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "mcp",
    "code_interpreter",
    "programmatic_tool_calling",
    "image_generation",
    "shell",
    "tool_search",
    "apply_patch",
)
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
_LOCAL_SHELL = {
    "type": "object",
    "properties": {
        "command": {
            "type": "array",
            "items": {"type": "string"},
            "description": "argv of the command",
        },
        "workdir": {"type": "string", "description": "working directory"},
        "timeout_ms": {"type": "integer", "description": "time limit in milliseconds"},
    },
    "required": ["command"],
}


# ---- tools ------------------------------------------------------------------------------------
def flat_name(namespace: str | None, name: str) -> str:
    """The template tool name of ``name`` inside ``namespace`` (Codex's canonical flat name)."""
    return f"{namespace.rstrip('_')}__{name.lstrip('_')}" if namespace else name


@dataclass
class ToolMap:
    """``template``: tools in the chat-template form; ``kinds``: flat name -> (kind, namespace, name),
    kind "function" | "custom" | "local_shell"."""

    template: list[dict] = dc_field(default_factory=list)
    kinds: dict[str, tuple[str, str | None, str]] = dc_field(default_factory=dict)

    def add(
        self, kind: str, namespace: str | None, name: str, description, parameters, path: str
    ) -> None:
        flat = flat_name(namespace, name)
        if flat in self.kinds:
            raise bad_request(f"'{path}.name': a second tool named {flat!r}", f"{path}.name")
        self.kinds[flat] = (kind, namespace, name)
        fn = {"name": flat, "parameters": parameters or {"type": "object", "properties": {}}}
        if description:
            fn["description"] = description
        self.template.append({"type": "function", "function": fn})

    def lookup(self, flat: str) -> tuple[str, str | None, str]:
        return self.kinds.get(flat, ("function", None, flat))


def _custom_parameters(t: dict, path: str) -> tuple[str, dict]:
    fmt = field(t, "format", dict, {}, path=f"{path}.format")
    note = "Its input is free-form text."
    if fmt.get("type") == "grammar":
        note = (
            f"Its input must follow this {fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}"
        ).strip()
    desc = (field(t, "description", str, "", path=f"{path}.description") + "\n\n" + note).strip()
    return desc, {
        "type": "object",
        "properties": {"input": {"type": "string"}},
        "required": ["input"],
    }


def build_tools(tools) -> ToolMap:
    m = ToolMap()
    if tools is None:
        return m
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array", "tools")
    for i, t in enumerate(tools):
        p = f"tools[{i}]"
        if not isinstance(t, dict):
            raise bad_request(f"'{p}' must be an object", p)
        kind = field(t, "type", str, "function", path=f"{p}.type")
        if kind == "namespace":
            ns = field(t, "name", str, required=True, path=f"{p}.name")
            members = field(t, "tools", list, required=True, path=f"{p}.tools")
            for j, sub in enumerate(members):
                _add_one(
                    m,
                    sub,
                    ns,
                    f"{p}.tools[{j}]",
                    field(t, "description", str, "", path=f"{p}.description"),
                )
        elif kind in ("function", "custom"):
            _add_one(m, t, None, p, "")
        elif kind == "local_shell":
            m.add(
                "local_shell",
                None,
                "local_shell",
                "Run a command on the user's machine and read its output.",
                _LOCAL_SHELL,
                p,
            )
        elif kind not in HOSTED_TOOLS:
            raise bad_request(f"'{p}.type' {kind!r} is not a Responses tool type", f"{p}.type")
        # hosted tools: this server cannot run them; they are left out of the prompt
    return m


def _add_one(m: ToolMap, t, ns: str | None, p: str, ns_description: str) -> None:
    if not isinstance(t, dict):
        raise bad_request(f"'{p}' must be an object", p)
    kind = field(t, "type", str, "function", path=f"{p}.type")
    name = name_of(t, "name", f"{p}.name")
    if kind == "function":
        desc = field(t, "description", str, "", path=f"{p}.description") or ns_description
        m.add("function", ns, name, desc, object_schema(t, "parameters", f"{p}.parameters"), p)
    elif kind == "custom":
        m.add("custom", ns, name, *_custom_parameters(t, p), p)
    else:
        raise bad_request(f"'{p}.type' must be 'function' or 'custom', got {kind!r}", f"{p}.type")


# ---- input items -> template messages ---------------------------------------------------------
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
