"""Tokenizer and chat template of a checkpoint (loading, rendering) and a small BPE builder."""

from ft_core.tokenizer.tokenizer import Tokenizer
from ft_core.tokenizer.build import train_bpe, write_tokenizer_files

__all__ = ["Tokenizer", "train_bpe", "write_tokenizer_files"]
