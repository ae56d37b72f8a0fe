"""API adapters: each turns its wire format into a ChatRequest and Generation events back into its wire format."""
