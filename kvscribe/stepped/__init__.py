"""The decoding core of the engines kvscribe runs step by step itself (the transformers
backend, the ONNX engine): token rules and search against one engine interface, on torch
tensors or numpy arrays (docs/architecture.md, "The decoding core")."""
