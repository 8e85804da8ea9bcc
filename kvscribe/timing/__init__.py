"""Time on the input's clock: words from tokens, the time map back through cuts, a batched
chunk's aligned words into segments."""
