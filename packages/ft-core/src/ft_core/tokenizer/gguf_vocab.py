"""A GGUF file's own tokenizer (``tokenizer.ggml.*``) as a ``tokenizers`` BPE, so a GGUF model needs no
other file: every token at its GGUF id, the merges, the pre-tokenizer llama.cpp names in
``tokenizer.ggml.pre`` (its split rules, llama-vocab.cpp), control tokens as special added tokens and
user-defined ones (``<think>`` …) as non-special ones, BOS prepended when ``add_bos_token`` says so, and
the chat template. The ids equal those of the model's Hugging Face tokenizer for the pre-tokenizers
listed in ``PRE`` (tests/test_gguf.py checks them); any other is refused by name. SentencePiece
vocabularies (model ``llama``) are built by ``gguf_spm``.
"""

from __future__ import annotations

from ft_core.errors import CheckpointError
from ft_core.tokenizer.gguf_spm import spm_model, spm_normalizer

# llama.cpp's token types (gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEEPSEEK3 = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
# tokenizer.ggml.pre -> (split regexes applied in turn before the byte-level mapping (None: the GPT-2
# rule of the byte-level pre-tokenizer itself), NFC normalisation (as the model's HF tokenizer),
# ignore_merges (a pre-split word that is a token is emitted whole)); llama-vocab.cpp's table.
PRE = {
    "gpt-2": (None, False, False),
    "olmo": (None, False, False),
    "qwen2": ([_QWEN2], True, False),
    "qwen35": ([_QWEN35], True, False),
    "llama-bpe": ([_LLAMA3], False, True),
    "llama3": ([_LLAMA3], False, True),
    "glm4": ([_LLAMA3], False, True),
    "gpt-4o": ([_GPT4O], False, False),
    "deepseek-v3": (_DEEPSEEK3, False, False),
}


def _byte_level(vocab: dict, merges: list[str], pre: str, where: str):
    """The byte-level BPE of a 'gpt2' vocabulary with llama.cpp's pre-tokenizer ``pre``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers as pt

    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep:
            raise CheckpointError(f"{where}: merge {m!r} is not two tokens split by a space")
        pairs.append((a, b))
    splits, nfc, ignore_merges = PRE[pre]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
    if splits is None:
        tok.pre_tokenizer = pt.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pt.Sequence(
            [pt.Split(Regex(r), behavior="isolated") for r in splits]
            + [pt.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    return tok


def gguf_tokenizer(meta, where: str):
    """(tokenizers.Tokenizer, tokenizer_config-like dict, chat template or None, eos ids) from the
    GGUF metadata reader ``meta`` (``meta.get(key, default)``); ``where`` names the file in errors."""
    from tokenizers import AddedToken, Tokenizer, processors

    kind = meta.get("tokenizer.ggml.model", None)
    if kind not in ("gpt2", "llama"):
        raise CheckpointError(
            f"{where}: tokenizer.ggml.model {kind!r} is not supported (ft reads byte-level BPE "
            "vocabularies, 'gpt2', and SentencePiece ones, 'llama', from a GGUF)"
        )
    pre = meta.get("tokenizer.ggml.pre", "gpt-2")
    if kind == "gpt2" and pre not in PRE:
        raise CheckpointError(
            f"{where}: tokenizer.ggml.pre {pre!r} is not one ft can reproduce "
            f"({', '.join(sorted(PRE))})"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    types = meta.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))
    merges = meta.get("tokenizer.ggml.merges", [])
    if len(types) != len(tokens):
        raise CheckpointError(
            f"{where}: {len(tokens)} tokens but {len(types)} token types (tokenizer.ggml.token_type)"
        )
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise CheckpointError(f"{where}: tokenizer.ggml.tokens repeats a token")
    if kind == "llama":
        unk = meta.get("tokenizer.ggml.unknown_token_id", None)
        model, decoder = spm_model(
            tokens, meta.get("tokenizer.ggml.scores", None), types, unk, where
        )
        tok = Tokenizer(model)
        tok.normalizer = spm_normalizer(bool(meta.get("tokenizer.ggml.add_space_prefix", True)))
        tok.decoder = decoder
    else:
        tok = _byte_level(vocab, merges, pre, where)
    tok.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, types)
            if k == CONTROL
        ]
    )
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False)
         for t, k in zip(tokens, types) if k == USER_DEFINED]
    )  # fmt: skip

    def tid(key):
        i = meta.get(f"tokenizer.ggml.{key}_token_id", None)
        if i is not None and not 0 <= int(i) < len(tokens):
            raise CheckpointError(f"{where}: tokenizer.ggml.{key}_token_id {i} is out of range")
        return None if i is None else int(i)

    bos, eos, pad = tid("bos"), tid("eos"), tid("padding")
    config = {
        f"{k}_token": None if i is None else tokens[i]
        for k, i in (("bos", bos), ("eos", eos), ("pad", pad))
    }
    if bos is not None and meta.get("tokenizer.ggml.add_bos_token", False):
        b = tokens[bos]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{b}:0 $A:0", pair=f"{b}:0 $A:0 {b}:1 $B:1", special_tokens=[(b, bos)]
        )
    eos_ids = [i for i in (eos, tid("eot"), tid("eom")) if i is not None]
    eos_ids = list(dict.fromkeys(eos_ids))
    return tok, config, meta.get("tokenizer.chat_template", None), eos_ids
