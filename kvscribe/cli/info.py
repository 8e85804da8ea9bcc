"""`kvscribe backends`, `kvscribe profiles [show NAME]`, `kvscribe models`."""

from __future__ import annotations

import typer
from rich.table import Table

from kvscribe.cli.render import print_error, stderr_console
from kvscribe.errors import KvscribeError


def _stdout_console():
    from rich.console import Console

    return Console(highlight=False)


def backends() -> None:
    """List backends: available here or not, and why."""
    from kvscribe import registry

    table = Table("backend", "status", "model formats", "cache controls", box=None)
    for name, entry in registry.discover().items():
        if entry.backend is None:
            table.add_row(name, f"[red]broken[/]: {entry.load_error}", "-", "-")
            continue
        reason = entry.backend.check_available()
        status = "[green]available[/]" if reason is None else f"[yellow]unavailable[/]: {reason}"
        caps = entry.backend.capabilities
        table.add_row(name, status, ", ".join(caps.model_formats), ", ".join(caps.kv_controls))
    _stdout_console().print(table)


profiles_app = typer.Typer(
    help="List hardware profiles, or show one in full.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@profiles_app.callback()
def profiles_list(ctx: typer.Context) -> None:
    """List hardware profiles and the cache policy each one selects."""
    if ctx.invoked_subcommand is not None:
        return
    from kvscribe import profile

    table = Table("profile", "device", "KV policy (self / cross)", "for", box=None)
    for name in profile.available():
        p = _load_or_exit(name, resolve_auto=False)
        policy = "decided by hardware" if name == profile.AUTO else f"{p.kv_self} / {p.kv_cross}"
        table.add_row(name, p.device, policy, p.summary)
    console = _stdout_console()
    console.print(table)
    chosen = _load_or_exit(profile.AUTO, resolve_auto=True)
    console.print(f"[dim]auto picks [bold]{chosen.name}[/bold] here ({chosen.chosen_by})[/]")


@profiles_app.command("show")
def profiles_show(name: str = typer.Argument(..., help="Profile name.")) -> None:
    """Print a profile's resolved settings for every backend."""
    profile = _load_or_exit(name, resolve_auto=True)
    console = _stdout_console()
    console.print(f"[bold]{profile.name}[/]  {profile.summary}")
    if profile.chosen_by:
        console.print(f"chosen by {profile.chosen_by}")
    console.print(f"why: {profile.why}")
    console.print(f"file: {profile.source}")
    table = Table("section", "setting", "value", box=None)
    table.add_row("device", "", profile.device)
    table.add_row("kv", "self", profile.kv_self)
    table.add_row("kv", "cross", profile.kv_cross)
    for backend, settings in profile.backends.items():
        for key, value in settings.items():
            table.add_row(backend, key, str(value))
    console.print(table)
    _print_layers(console, profile)


def _print_layers(console, profile) -> None:
    """The self-attention policy resolved per decoder layer of the default model."""
    from kvscribe.kvcache.spec import parse_cross, parse_policy
    from kvscribe.models import resolve
    from kvscribe.models.ct2_file import whisper_dims

    try:
        model = resolve(None, ("ctranslate2",))
        layers = whisper_dims(model.path / "model.bin").n_text_layer
        specs = parse_policy(profile.kv_self, layers)
        cross = parse_cross(profile.kv_cross)
    except KvscribeError as exc:
        print_error(stderr_console(), exc)
        raise typer.Exit(exc.exit_code) from None
    console.print(f"transformers backend, {model.name} ({layers} decoder layers):")
    for index, spec in enumerate(specs):
        console.print(f"  layer {index}: {spec.describe()}")
    console.print(f"  cross-attention: {cross.describe()}")


def models_command() -> None:
    """List models that resolve without a network, and how to get the others."""
    from kvscribe.models import list_models

    table = Table("model", "format", "status", "where / how to get it", box=None)
    for row in list_models():
        status = "[green]ready[/]" if row.available else "[yellow]not installed[/]"
        table.add_row(row.name, row.format, status, row.where)
    _stdout_console().print(table)


def _load_or_exit(name: str, resolve_auto: bool):
    from kvscribe import profile

    try:
        return profile.load(name, resolve_auto=resolve_auto)
    except KvscribeError as exc:
        print_error(stderr_console(), exc)
        raise typer.Exit(exc.exit_code) from None
