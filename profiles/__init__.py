"""Built-in hardware profiles: the *.toml files beside this one (data only, no code)."""
