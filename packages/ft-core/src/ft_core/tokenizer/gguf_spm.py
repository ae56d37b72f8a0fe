"""A GGUF SentencePiece vocabulary (``tokenizer.ggml.model`` = ``llama``: Llama 1/2, Mistral,
Mixtral, Phi-3) as a ``tokenizers`` BPE that gives llama.cpp's ids.

llama.cpp tokenizes these by pieces and scores (llama-vocab.cpp, the SPM session): the text, with a
space put in front (``tokenizer.ggml.add_space_prefix``, default true) and spaces written as "▁",
starts as one symbol per character; the adjacent pair whose joined text is a token of the highest
score is joined, again and again; a symbol that is no token becomes its UTF-8 bytes' ``<0xNN>``
tokens. A BPE whose merges are every split of every token into two tokens, ranked by the joined
token's score (highest first), joins the same pairs in the same order, and ``byte_fallback`` is the
byte rule. This is also how the model's Hugging Face "fast" tokenizer is built.
"""

from __future__ import annotations

from ft_core.errors import CheckpointError

BYTE = 6  # gguf.TokenType.BYTE


def spm_model(tokens: list[str], scores, types: list[int], unk: int | None, where: str):
    """(``tokenizers.models.BPE``, its decoder) for the pieces ``tokens`` with their
    ``scores`` (higher joins first) and gguf token ``types``; ``unk`` is the unknown token's id."""
    from tokenizers import decoders, models

    if scores is None or len(scores) != len(tokens):
        raise CheckpointError(
            f"{where}: a 'llama' (SentencePiece) vocabulary needs one tokenizer.ggml.scores entry "
            f"per token ({len(tokens)} tokens, "
            f"{'no' if scores is None else len(scores)} scores)"
        )
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked = []  # (-score of the joined piece, its id, split point, left, right)
    for i, (piece, kind) in enumerate(zip(tokens, types)):
        if kind == BYTE or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((-float(scores[i]), i, cut, left, right))
    ranked.sort()
    merges = [(left, right) for *_, left, right in ranked]
    model = models.BPE(
        vocab=vocab,
        merges=merges,
        unk_token=None if unk is None else tokens[unk],
        fuse_unk=True,
        byte_fallback=True,
    )
    decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),  # the space put in front
        ]
    )
    return model, decoder


def spm_normalizer(add_space_prefix: bool):
    """Spaces as "▁", and one in front of each run of text between special tokens when
    ``add_space_prefix`` (llama.cpp puts it at the start and after each special token)."""
    from tokenizers import normalizers

    steps = [normalizers.Prepend("▁")] if add_space_prefix else []
    return normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")])
