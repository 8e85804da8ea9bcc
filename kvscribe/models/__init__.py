"""Model store: resolve names and paths to models on disk (see store.resolve)."""

from kvscribe.models.store import ModelListing, ModelRef, list_models, resolve

__all__ = ["ModelListing", "ModelRef", "list_models", "resolve"]
