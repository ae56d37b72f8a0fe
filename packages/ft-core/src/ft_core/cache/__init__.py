"""Caches of sequence state: the paged KV cache and the radix tree that shares its pages between requests."""
