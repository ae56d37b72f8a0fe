"""Caches of sequence state: the paged KV cache."""
