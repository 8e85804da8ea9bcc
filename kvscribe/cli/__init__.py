"""Command-line interface (typer + rich)."""

from kvscribe.cli.app import app, main

__all__ = ["app", "main"]
