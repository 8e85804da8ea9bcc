"""Decoder key/value cache: policies (transformers backend) and size arithmetic."""
