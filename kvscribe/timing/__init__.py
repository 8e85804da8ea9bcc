"""Time on the input's clock: words from tokens, the time map back through cuts, aligned
words into segments (a batched chunk's: kvscribe/aligned_chunks.py)."""
