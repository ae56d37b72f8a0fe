"""Anthropic Messages tools: custom tools -> template tools, ``tool_choice`` -> ChatRequest's.

    convert_tools([{"name", "description"?, "input_schema"}]) -> [{"type": "function", "function"}]
    tool_choice_of({"type": "auto"|"any"|"tool"|"none", "name"?, "disable_parallel_tool_use"?})
        -> ("auto" | "required" | "none" | {"name": NAME}, disable_parallel_tool_use)

Server tools (web_search_*, code_execution_*, ...) are ignored: this server cannot run them and
Claude Code sends some unasked.
"""

from __future__ import annotations

from ft_serve.api.fields import choice, field, name_of, object_schema
from ft_serve.server.errors import bad_request


def convert_tools(tools) -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array", "tools")
    out, seen = [], set()
    for i, t in enumerate(tools):
        p = f"tools[{i}]"
        if not isinstance(t, dict):
            raise bad_request(f"'{p}' must be an object", p)
        if t.get("type") not in (None, "custom"):
            continue  # a server tool (web_search_20250305, ...): not available here, ignored
        name = name_of(t, "name", f"{p}.name", 128)
        if name in seen:
            raise bad_request(
                f"'{p}.name': tool names must be unique, {name!r} repeats", f"{p}.name"
            )
        seen.add(name)
        fn = {
            "name": name,
            "parameters": object_schema(t, "input_schema", f"{p}.input_schema", typed=True),
        }
        desc = field(t, "description", str, None, path=f"{p}.description")
        if desc is not None:
            fn = {"name": name, "description": desc, "parameters": fn["parameters"]}
        out.append({"type": "function", "function": fn})
    return out


def tool_choice_of(tc) -> tuple[str | dict, bool]:
    """(ChatRequest.tool_choice, disable_parallel_tool_use)."""
    if tc is None:
        return "auto", False
    if not isinstance(tc, dict):
        raise bad_request(
            '\'tool_choice\' must be an object such as {"type": "auto"}', "tool_choice"
        )
    field(tc, "type", str, required=True, path="tool_choice.type")
    t = choice(tc, "type", ("auto", "any", "tool", "none"), path="tool_choice.type")
    one = bool(
        field(
            tc,
            "disable_parallel_tool_use",
            bool,
            False,
            path="tool_choice.disable_parallel_tool_use",
        )
    )
    if t == "tool":
        return {"name": field(tc, "name", str, required=True, path="tool_choice.name")}, one
    return {"auto": "auto", "any": "required", "none": "none"}[t], one
