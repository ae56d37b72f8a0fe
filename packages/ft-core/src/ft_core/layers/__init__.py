"""Layers: norms, rotary embeddings, attention (GQA, MLA), dense MLP, MoE."""
