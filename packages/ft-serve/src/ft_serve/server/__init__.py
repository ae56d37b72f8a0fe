"""The HTTP server: one engine thread, API adapters, metrics (DESIGN §2, §6)."""
