"""kvscribe's bytecode written once, as `pip install` writes an installed package's.

Where PYTHONDONTWRITEBYTECODE is set (CI and the development machines), an editable
install's modules are compiled from source in every process that imports them, and the
suite starts hundreds of `kvscribe` processes: importing the command took 0.62 CPU s
against 0.34 with the bytecode there (2 cores of an AMD EPYC). Python still reads
bytecode it finds; only writing it is off. The benchmarks that time whole processes
(benchmarks/longform_peers.py) do the same, so kvscribe is timed as users run it."""

from __future__ import annotations

import compileall


def compile_kvscribe() -> None:
    """Every kvscribe module's bytecode, written where missing or stale (quick when not)."""
    import kvscribe
    import kvscribe.backends  # a folder of its own (backends/ beside kvscribe/)

    for folder in {*kvscribe.__path__, *kvscribe.backends.__path__}:
        compileall.compile_dir(folder, quiet=1)
