"""kvscribe: Whisper transcription with hardware profiles and KV-cache policies."""

__version__ = "0.1.0"
