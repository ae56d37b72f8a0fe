"""Checkpoint loading: safetensors index, dequantisation of stored formats, config parsing."""
