"""The request side of POST /v1/chat/completions: ``messages`` and ``tools`` checked and turned into
the chat template's form, and ``tool_choice`` read. Every refusal is a 400 naming the field's path
(``messages[2].tool_calls[0].function.name``)."""

from __future__ import annotations

from ft_serve.api.fields import choice, field, name_of, object_schema
from ft_serve.server.errors import bad_request
from ft_serve.server.service import parse_arguments

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def text_of(content, path: str, required: bool = False) -> str:
    """Message content as text: a string, or an array of text parts (other part types are refused);
    ``required``: null or absent content is a 400 (only assistant messages may leave it out)."""
    if content is None:
        if required:
            raise bad_request(f"'{path}' is required for this message role", path)
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{path}' must be a string or an array of content parts", path)
    out = []
    for i, part in enumerate(content):
        p = f"{path}[{i}]"
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, dict):
            raise bad_request(f"'{p}' must be a content part object", p)
        t = part.get("type")
        if t in ("text", "input_text", "output_text"):
            out.append(field(part, "text", str, required=True, path=f"{p}.text"))
        elif t in ("image_url", "input_image", "image", "input_audio", "file", "input_file"):
            raise bad_request(
                f"'{p}': content of type {t!r} is not supported by this text-only model", p
            )
        else:
            raise bad_request(f"'{p}.type' {t!r} is not a known content part type", f"{p}.type")
    return "".join(out)


def convert_messages(msgs) -> list[dict]:
    if not isinstance(msgs, list) or not msgs:
        raise bad_request("'messages' must be a non-empty array", "messages")
    out = []
    for i, m in enumerate(msgs):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad_request(f"'{p}' must be an object", p)
        role = choice(m, "role", ROLES, path=f"{p}.role")
        if role is None:
            raise bad_request(f"'{p}.role' is required", f"{p}.role")
        msg = {
            "role": "system" if role == "developer" else ("tool" if role == "function" else role),
            "content": text_of(m.get("content"), f"{p}.content", role != "assistant"),
        }
        if role == "assistant":
            r = m.get("reasoning_content", m.get("reasoning"))
            if isinstance(r, str) and r:
                msg["reasoning_content"] = r
            calls = field(m, "tool_calls", list, None, path=f"{p}.tool_calls")
            if calls:
                msg["tool_calls"] = [
                    _tool_call(c, f"{p}.tool_calls[{j}]") for j, c in enumerate(calls)
                ]
        if role in ("tool", "function"):
            msg["tool_call_id"] = field(
                m, "tool_call_id", str, "", required=role == "tool", path=f"{p}.tool_call_id"
            )
            if m.get("name"):
                msg["name"] = m["name"]
        out.append(msg)
    return out


def _tool_call(c, p: str) -> dict:
    if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
        raise bad_request(f"'{p}' must be an object with a 'function'", p)
    f = c["function"]
    name = field(f, "name", str, required=True, path=f"{p}.function.name")
    args = f.get("arguments", "{}")
    return {
        "id": c.get("id") or "",
        "type": "function",
        "function": {"name": name, "arguments": parse_arguments(args)},
    }


def convert_tools(tools, path: str = "tools") -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request(f"'{path}' must be an array", path)
    out, seen = [], set()
    for i, t in enumerate(tools):
        p = f"{path}[{i}]"
        if (
            not isinstance(t, dict)
            or t.get("type", "function") != "function"
            or not isinstance(t.get("function"), dict)
        ):
            raise bad_request(f'\'{p}\' must be {{"type": "function", "function": {{...}}}}', p)
        f = t["function"]
        name = name_of(f, "name", f"{p}.function.name")
        if name in seen:
            raise bad_request(
                f"'{p}.function.name': tool names must be unique, {name!r} repeats",
                f"{p}.function.name",
            )
        seen.add(name)
        object_schema(f, "parameters", f"{p}.function.parameters")
        field(f, "description", str, None, path=f"{p}.function.description")
        out.append(
            {
                "type": "function",
                "function": {
                    k: f[k]
                    for k in ("name", "description", "parameters", "strict")
                    if f.get(k) is not None
                },
            }
        )
    return out


def tool_choice_of(body: dict):
    tc = body.get("tool_choice")
    if tc is None:
        return "auto"
    if isinstance(tc, str):
        if tc not in ("auto", "none", "required"):
            raise bad_request(
                f"'tool_choice' must be 'auto', 'none', 'required' or a named function, got {tc!r}",
                "tool_choice",
            )
        return tc
    if isinstance(tc, dict):
        name = (
            (tc.get("function") or {}).get("name")
            if isinstance(tc.get("function"), dict)
            else tc.get("name")
        )
        if isinstance(name, str) and name:
            return {"name": name}
    raise bad_request(
        "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        "tool_choice",
    )
