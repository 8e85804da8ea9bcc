"""The ONNX export, engine and backend (backends/onnx/)."""
