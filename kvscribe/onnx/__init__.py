"""Whisper exported to ONNX with the decoder's KV cache as explicit graph inputs and outputs
(issue 26), so kvscribe's cache policies can run between steps outside the graph.

`kvscribe setup onnx` writes the export (kvscribe/onnx/export.py); engine.py runs it with
kvscribe's cache, for the onnx backend (backends/onnx.py).
Importing this package imports nothing heavy: torch and onnx load only when exporting.
"""
