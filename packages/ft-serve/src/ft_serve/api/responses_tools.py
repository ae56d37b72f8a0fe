"""Responses API tools -> template tools (``ToolMap``, ``build_tools``).

``function`` tools pass through; a ``namespace`` tool's members become flat template tools
named ``<namespace>__<name>`` (Codex's own flattening: stray underscores around the joint trimmed)
and the model's calls to them come back as ``function_call`` items with ``name`` and ``namespace``
split again. ``custom`` (free-form) tools become functions with one string parameter ``input`` and
come back as ``custom_tool_call``; ``local_shell`` becomes a function ``local_shell`` and comes back
as ``local_shell_call``. Hosted tools this server cannot run (web_search, file_search, image_generation,
code_interpreter, computer_use, mcp, tool_search, ...) are dropped from the prompt (echoed only);
a type the Responses API does not have is a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field

from ft_serve.api.fields import field, name_of, object_schema
from ft_serve.server.errors import bad_request

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
