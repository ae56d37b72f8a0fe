"""Render a checkpoint's Jinja chat template the way Hugging Face tokenizers do."""

from __future__ import annotations

import functools
import json
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ft_core.errors import RequestError


def _raise(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


# A message's reasoning travels under several names; templates read ``reasoning_content`` (most)
# or ``thinking`` (gpt-oss). Fill both from whichever is present, as transformers does.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _alias_reasoning(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        if isinstance(m, dict):
            r = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
            if r is not None:
                m = {"thinking": r, **m, "reasoning_content": r}
        out.append(m)
    return out


def render(source: str, messages: list[dict], **variables) -> str:
    """Render ``messages`` (and ``tools``, ``add_generation_prompt``, flags such as ``enable_thinking``)."""
    try:
        return compile_template(source).render(messages=_alias_reasoning(messages), **variables)
    except jinja2.exceptions.TemplateError as e:
        raise RequestError(f"chat template: {e}") from e
