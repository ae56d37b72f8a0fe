"""Build a small byte-level BPE tokenizer deterministically (demo model and test checkpoints).

The corpus is text this module generates itself, so a fresh machine needs no download and two
builds give byte-identical ``tokenizer.json`` files.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

_WORDS = (
    "the a an of to in is it that for on with as was by at be this are from or have not you they "
    "we he she his her their what which who when where why how all each every some any one two three "
    "model expert layer token cache memory host device copy compute kernel route gate weight bias "
    "attention query key value head rotary position window sink norm scale block group shard file "
    "prefill decode sample greedy temperature probability logits vocabulary prompt completion answer "
    "hello world user assistant system tool call result function argument think reason plan step "
    "def return import class self if else elif for while try except with yield lambda None True False "
    "print len range list dict set tuple int float str bytes open read write path json http server "
    "request response stream error status code line number name type shape dtype size count total "
    "fast slow small large first last next previous start stop end begin finish run test check pass"
).split()


def _corpus() -> list[str]:
    """Deterministic pseudo-text: word sequences from a fixed LCG, plus digits and punctuation."""
    lines, state = [], 12345
    for i in range(4000):
        words = []
        for _ in range(12):
            state = (state * 1103515245 + 12345) % (1 << 31)
            words.append(_WORDS[state % len(_WORDS)])
        sep = ", " if i % 3 else ". "
        lines.append(" ".join(words[:6]) + sep + " ".join(words[6:]) + f" {i % 97}.")
        lines.append(f"    x_{i % 13} = f({i % 7}, [{i % 5}, {i % 11}])  # {words[0]}")
    return lines


def train_bpe(vocab_size: int = 800, special_tokens: list[str] | None = None) -> HFTokenizer:
    """A byte-level BPE with ``vocab_size`` entries (special tokens included, ids after the merges)."""
    special_tokens = list(special_tokens or [])
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens(special_tokens)
    return tok


def write_tokenizer_files(
    tok: HFTokenizer,
    out_dir: str | Path,
    *,
    chat_template: str,
    bos_token: str | None,
    eos_token: str,
    pad_token: str | None = None,
    model_max_length: int = 4096,
) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` (with the chat template) as the hub does."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos_token,
        "eos_token": eos_token,
        "pad_token": pad_token or eos_token,
        "model_max_length": model_max_length,
        "add_bos_token": bos_token is not None,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
