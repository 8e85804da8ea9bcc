"""`kvscribe setup whisper-cpp`: build (or find) the whisper-cli the whispercpp backend runs.
`kvscribe setup onnx`: export Whisper to ONNX graphs with an explicit KV cache."""

from __future__ import annotations

import typer

from kvscribe.cli.render import print_error, setup_logging, stderr_console
from kvscribe.errors import KvscribeError

setup_app = typer.Typer(help="Install what optional backends need.", no_args_is_help=True)


@setup_app.command("whisper-cpp")
def whisper_cpp(
    force: bool = typer.Option(
        False, "--force", help="Build even if a usable whisper-cli is already found."
    ),
    jobs: int = typer.Option(
        None, "--jobs", "-j", min=1, show_default="CPU count", help="Parallel compile jobs."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show the build log on failure."),
) -> None:
    """Build whisper-cli and whisper-quantize (CPU), patched for quantized KV caches.

    The source is whisper.cpp's on PyPI; an existing build is reused.
    Needs cmake and a C++ compiler; takes ~3 minutes on 2 cores. The binaries go
    into kvscribe's cache dir, keyed by whisper.cpp version and patch. A whisper-cli
    in KVSCRIBE_WHISPER_CLI or the config file is still used first; one on PATH without
    the patch's KV cache types (-kvs/-kvc) does not count as ready.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kvscribe.backends.whispercpp import binary, build

    console = stderr_console()
    setup_logging(debug)
    try:
        binary.check_explicit()  # a build is never run while the user's choice names another
        if not force:
            found = binary.patched()
            if found is not None:
                console.print(f"whisper-cli ready: {found.path} ({found.found_by}); nothing to do")
                typer.echo(str(found.path))
                return
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        ) as progress:
            task = progress.add_task("starting", total=1.0)
            logged: set[str] = set()

            def report(what: str, fraction: float | None) -> None:
                progress.update(task, description=what, completed=fraction or 0.0)
                line = what + (f" {int(fraction * 10) * 10}%" if fraction else "")
                if not console.is_terminal and line not in logged:  # a log file: each 10 %
                    logged.add(line)
                    console.print(line)

            # Another set-up may finish while this one waits for the build lock.
            path = build.build(report, jobs, unless_found=None if force else binary.patched)
    except KvscribeError as exc:
        print_error(console, exc)
        raise typer.Exit(exc.exit_code) from None
    console.print(f"built whisper-cli {binary.WHISPER_CPP_VERSION}: {path}")
    typer.echo(str(path))


@setup_app.command("onnx")
def onnx(
    model: str = typer.Option(
        None, "--model", "-m", show_default="tiny.en (embedded)", help="Model name or path."
    ),
    compute_type: str = typer.Option(
        "int8",
        "--compute-type",
        help="int8: float32 graphs plus int8 copies (onnxruntime dynamic quantization), "
        "what the built-in profiles run (cpu-laptop and tiny-vram int8, no-loss and gpu "
        "float32); float32: the float32 graphs only.",
    ),
    force: bool = typer.Option(
        False, "--force", help="Export again (int8 copies already there are made again too)."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of a failure."),
) -> None:
    """Export Whisper to ONNX graphs whose decoder KV cache is graph inputs and outputs.

    An encoder graph (log-mel in; every decoder layer's cross-attention K/V out) and a
    decoder-step graph (tokens, their positions, each layer's kept self-attention K/V and
    the cross-attention K/V in; logits, the new tokens' K/V and the alignment heads' scores
    out). The weights are the transformers backend's (the embedded tiny.en is converted
    once); needs the onnx extra. The graphs and a manifest.json go into kvscribe's cache
    dir, keyed by the model's digest; an export already there is reused. `--backend
    onnx` runs them.
    """
    import time

    from kvscribe.backends.onnx import export

    console = stderr_console()
    setup_logging(debug)
    try:
        if not force:
            found = export.find(model, compute_type)
            if found is not None:
                console.print(f"ONNX export ready: {found.path}; nothing to do")
                typer.echo(str(found.path))
                return
        started = time.perf_counter()
        made = export.export(model, compute_type, force, progress=console.print)
    except KvscribeError as exc:
        if debug and exc.__cause__ is not None:
            console.print_exception()
        print_error(console, exc)
        raise typer.Exit(exc.exit_code) from None
    seconds = time.perf_counter() - started
    sizes = ", ".join(
        f"{entry['file']} {entry['bytes'] / 1e6:.1f} MB"
        for graphs in made.manifest["graphs"].values()
        for entry in graphs.values()
    )
    console.print(f"exported {made.manifest['model']['name']} in {seconds:.1f} s: {sizes}")
    typer.echo(str(made.path))
