"""Data files shipped inside the package (the bench's default clip)."""
