"""whisper.cpp support: find or build whisper-cli, run it, read its figures."""
