"""Tokenizer files for the tiny test checkpoints: one small BPE per model family.

Each family gets its real special tokens (ids differ from the hub: the builder appends them after
the BPE merges), its own chat template (``tiny_chat_templates.py``) and the ``bos``/``eos``/``pad``
choices of its real checkpoints. As on the hub, markup tokens that the model writes as text
(``<think>``, ``<tool_call>`` …) are added tokens with ``special=False`` where the family does so
(Qwen, DeepSeek, GLM), so ``decode(skip_special_tokens=True)`` keeps them. Where transformers rebuilds a
model type's tokenizer with its own class whatever ``tokenizer_class`` says (Qwen3.5), ``tokenizer.json``
takes that class's normalizer and pre-tokenizer, so both read the file the same way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

import transformers
from tokenizers import AddedToken, processors
from tokenizers import Tokenizer as HFTokenizer

from ft_core.tokenizer.build import train_bpe, write_tokenizer_files
from tiny_chat_templates import TEMPLATES

VOCAB_SIZE = 800  # total, special and added tokens included


@dataclass(frozen=True)
class Family:
    special: tuple[str, ...]  # control tokens (special=True)
    added: tuple[str, ...] = ()  # markup the model writes as text (special=False)
    bos: str | None = None  # tokenizer_config bos_token; also prepended by the post-processor
    eos: str = ""  # tokenizer_config eos_token
    pad: str | None = None
    generation_eos: tuple[str, ...] = field(default=())  # generation_config.json eos_token_id list
    generation_bos: str | None = None  # generation_config.json bos_token_id (defaults to ``bos``)
    hf_class: str | None = (
        None  # the transformers tokenizer class AutoTokenizer forces on the model type
    )


_DS = "<｜{}｜>".format  # DeepSeek's full-width bars and "▁" word separators
_QWEN = Family(
    special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    added=(
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
    ),
    eos="<|im_end|>",
    pad="<|endoftext|>",
    generation_eos=("<|im_end|>", "<|endoftext|>"),
    generation_bos="<|endoftext|>",
)
FAMILIES: dict[str, Family] = {
    "qwen": _QWEN,
    # Qwen3.5 / 3.6: the same ChatML and markup tokens (``<function=`` / ``<parameter=`` are plain text).
    "qwen35": replace(_QWEN, hf_class="Qwen3_5Tokenizer"),
    "deepseek": Family(
        special=(
            _DS("begin▁of▁sentence"),
            _DS("end▁of▁sentence"),
            _DS("▁pad▁"),
            _DS("User"),
            _DS("Assistant"),
        ),
        added=(
            "<think>",
            "</think>",
            _DS("tool▁calls▁begin"),
            _DS("tool▁calls▁end"),
            _DS("tool▁call▁begin"),
            _DS("tool▁call▁end"),
            _DS("tool▁sep"),
            _DS("tool▁outputs▁begin"),
            _DS("tool▁outputs▁end"),
            _DS("tool▁output▁begin"),
            _DS("tool▁output▁end"),
        ),
        bos=_DS("begin▁of▁sentence"),
        eos=_DS("end▁of▁sentence"),
        pad=_DS("▁pad▁"),
        generation_eos=(_DS("end▁of▁sentence"),),
    ),
    "mistral": Family(
        special=(
            "<unk>",
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ),
        bos="<s>",
        eos="</s>",
        generation_eos=("</s>",),
    ),
    "olmoe": Family(
        special=("<|endoftext|>", "<|padding|>", "<|system|>", "<|user|>", "<|assistant|>"),
        eos="<|endoftext|>",
        pad="<|padding|>",
        generation_eos=("<|endoftext|>",),
    ),
    "harmony": Family(
        special=(
            "<|startoftext|>",
            "<|endoftext|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|channel|>",
            "<|return|>",
            "<|call|>",
            "<|constrain|>",
        ),
        eos="<|return|>",
        pad="<|endoftext|>",
        generation_eos=("<|return|>", "<|endoftext|>", "<|call|>"),
        generation_bos="<|startoftext|>",
    ),
    "glm": Family(
        special=(
            "<|endoftext|>",
            "[gMASK]",
            "<sop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
        ),
        added=(
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
        ),
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        generation_eos=("<|endoftext|>", "<|user|>", "<|observation|>"),
    ),
}


@functools.lru_cache(maxsize=None)
def _tokenizer_json(family: str) -> str:
    """The family's ``tokenizer.json`` text (training is deterministic; cached per process)."""
    fam = FAMILIES[family]
    tok = train_bpe(VOCAB_SIZE - len(fam.added), special_tokens=list(fam.special))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in fam.added])
    if (
        fam.hf_class is not None
    ):  # the splitting rules of the class transformers will load the file with
        ref = getattr(transformers, fam.hf_class)().backend_tokenizer
        tok.normalizer, tok.pre_tokenizer, tok.decoder = (
            ref.normalizer,
            ref.pre_tokenizer,
            ref.decoder,
        )
    if fam.bos is not None:
        # Real Llama/DeepSeek tokenizer.json files prepend BOS in their post-processor.
        bos_id = tok.token_to_id(fam.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{fam.bos}:0 $A:0",
            pair=f"{fam.bos}:0 $A:0 {fam.bos}:1 $B:1",
            special_tokens=[(fam.bos, bos_id)],
        )
    return tok.to_str()


def write_tokenizer(family: str, out_dir: str | Path) -> HFTokenizer:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` for ``family``; returns the tokenizer."""
    fam = FAMILIES[family]
    tok = HFTokenizer.from_str(_tokenizer_json(family))
    write_tokenizer_files(
        tok,
        out_dir,
        chat_template=TEMPLATES[family],
        bos_token=fam.bos,
        eos_token=fam.eos,
        pad_token=fam.pad,
    )
    return tok


def special_ids(family: str, tok: HFTokenizer) -> dict:
    """bos/eos/pad ids for config.json and generation_config.json."""
    fam = FAMILIES[family]
    tid = tok.token_to_id
    bos = fam.generation_bos or fam.bos
    return {
        "bos_token_id": tid(bos) if bos else None,
        "eos_token_id": [tid(t) for t in fam.generation_eos]
        if len(fam.generation_eos) > 1
        else tid(fam.eos),
        "pad_token_id": tid(fam.pad or fam.eos),
    }
