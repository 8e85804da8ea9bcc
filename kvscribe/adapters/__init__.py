"""Adapters: the one place each third-party library is used beyond its documented API."""
