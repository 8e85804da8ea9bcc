"""The ONNX export, engine and backend (kvscribe/onnx, backends/onnx.py)."""
