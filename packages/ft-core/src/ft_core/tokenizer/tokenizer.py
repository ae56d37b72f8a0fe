"""A checkpoint's tokenizer: ``tokenizer.json`` (HF tokenizers), special tokens and chat template."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from ft_core.errors import CheckpointError
from ft_core.tokenizer.chat_template import render

_LONG_TEXT = 1 << 15  # characters; longer texts are encoded without holding the GIL


def _token_str(v) -> str | None:
    """Special tokens appear as plain strings or as AddedToken dicts ({"content": ...})."""
    if isinstance(v, dict):
        return v.get("content")
    return v


class Tokenizer:
    """Encode/decode text and render chat prompts for one checkpoint directory."""

    def __init__(
        self, tok: HFTokenizer, config: dict, chat_template: str | None, eos_ids: list[int]
    ):
        self._tok = tok
        self.config = config
        self.chat_template = chat_template
        self.eos_token_ids = eos_ids
        self.bos_token = _token_str(config.get("bos_token"))
        self.eos_token = _token_str(config.get("eos_token"))
        self.special_ids = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}

    @classmethod
    def from_dir(cls, path: str | Path, generation_eos: list[int] | None = None) -> "Tokenizer":
        path = Path(path)
        tj = path / "tokenizer.json"
        if not tj.is_file():
            raise CheckpointError(f"{tj}: missing (ft needs a fast tokenizer file, tokenizer.json)")
        try:
            tok = HFTokenizer.from_file(str(tj))
        except Exception as e:  # the tokenizers library raises a bare Exception
            raise CheckpointError(f"{tj}: cannot be read as a tokenizer: {e}") from e
        config = _read_json(path / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next(
                (t["template"] for t in template if t.get("name") == "default"),
                template[0]["template"],
            )
        jinja_file = path / "chat_template.jinja"
        if jinja_file.is_file():
            template = jinja_file.read_text()
        eos = list(generation_eos or [])
        eos_tok = _token_str(config.get("eos_token"))
        if eos_tok is not None and (i := tok.token_to_id(eos_tok)) is not None and i not in eos:
            eos.append(i)
        return cls(tok, config, template, eos)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens`` the tokenizer's own post-processor runs (BOS).
        A long text goes through the batch call (same ids), which releases the GIL while it runs: the
        single-text call holds it for seconds on a megabyte, stopping every other thread (a server's
        event loop)."""
        if len(text) > _LONG_TEXT:
            return self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(i)

    def apply_chat_template(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **flags,
    ) -> str:
        """The prompt text for ``messages``; ``flags`` (e.g. ``enable_thinking``) pass through to the template."""
        if not self.chat_template:
            raise CheckpointError(
                "this checkpoint has no chat template (tokenizer_config.json or chat_template.jinja)"
            )
        special = {k: _token_str(v) for k, v in self.config.items() if k.endswith("_token")}
        return render(
            self.chat_template,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **special,
            **flags,
        )


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from e
