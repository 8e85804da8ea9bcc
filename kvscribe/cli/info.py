"""`kvscribe backends`, `kvscribe profiles [show NAME]`, `kvscribe models`."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from kvscribe.cli.render import print_error, stderr_console
from kvscribe.errors import KvscribeError


def _stdout_console():
    from rich.console import Console

    return Console(highlight=False)


def backends() -> None:
    """List backends: available here or not, and why."""
    from kvscribe import registry

    table = Table("backend", "status", "model formats", "devices", "cache controls", box=None)
    for name, entry in registry.discover().items():
        if entry.backend is None:
            table.add_row(name, f"[red]broken[/]: {escape(str(entry.load_error))}", "-", "-", "-")
            continue
        reason = entry.backend.check_available()
        status = (
            "[green]available[/]" if reason is None else f"[yellow]unavailable[/]: {escape(reason)}"
        )
        caps = entry.backend.capabilities
        devices = entry.backend.devices_here() if reason is None else ", ".join(caps.devices)
        kv = ", ".join(caps.kv_controls)
        table.add_row(name, status, ", ".join(caps.model_formats), devices, kv)
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

    table = Table("profile", "device", "KV policy (self / cross)", "vs seed", "for", box=None)
    broken: list[KvscribeError] = []
    for name in profile.available():
        try:
            p = profile.load(name, resolve_auto=False)
        except KvscribeError as exc:  # one bad user profile: listed, the others still shown
            broken.append(exc)
            table.add_row(escape(name), "-", "[red]broken[/]: see below", "-", "-")
            continue
        policy = "decided by hardware" if name == profile.AUTO else f"{p.kv_self} / {p.kv_cross}"
        table.add_row(name, p.device, policy, _seed_marker(p), escape(p.summary))
    console = _stdout_console()
    console.print(table)
    console.print(
        "[dim]vs seed: whether the policy is the one the seed decision table (where the "
        "profiles started) recommends; `kvscribe profiles show NAME` shows both and the "
        "measured reason[/]"
    )
    for exc in broken:
        print_error(stderr_console(), exc)
    chosen = _load_or_exit(profile.AUTO, resolve_auto=True)
    console.print(f"[dim]auto picks [bold]{chosen.name}[/bold] here ({chosen.chosen_by})[/]")
    if broken:
        raise typer.Exit(broken[0].exit_code)


@profiles_app.command("show")
def profiles_show(name: str = typer.Argument(..., help="Profile name.")) -> None:
    """Print a profile's resolved settings for every backend."""
    profile = _load_or_exit(name, resolve_auto=True)
    console = _stdout_console()
    console.print(f"[bold]{escape(profile.name)}[/]  {escape(profile.summary)}")
    # A user's profile is plain text: a "[/home]" in its why is not markup.
    if profile.chosen_by:
        console.print(f"chosen by {escape(profile.chosen_by)}")
    console.print(f"why: {escape(profile.why)}")
    console.print(f"file: {escape(profile.source)}")
    table = Table("section", "setting", "value", box=None)
    table.add_row("device", "", profile.device)
    table.add_row("kv", "self", escape(profile.kv_self))
    table.add_row("kv", "cross", escape(profile.kv_cross))
    for backend, settings in profile.backends.items():
        for key, value in settings.items():
            table.add_row(escape(backend), escape(str(key)), escape(str(value)))
    console.print(table)
    if profile.seed is not None:
        _print_seed(console, profile)
    _print_layers(console, profile)


def _seed_marker(p) -> str:
    """A word for the list: does the profile use the seed decision table's policy?"""
    from kvscribe import profile

    if p.name == profile.AUTO or p.seed is None:
        return "-"
    return "same" if profile.seed_agrees(p) else "differs"


def _print_seed(console, profile) -> None:
    """The seed decision table's recommendation beside the chosen policy, and why they differ."""
    seed = profile.seed
    console.print('seed decision table (docs/profiles.md, "The seed decision table"):')
    _print_indented(console, f"says:            {seed.table}")
    # soft_wrap: a policy or command that rich breaks across lines cannot be copied
    console.print(
        f"  table's version: self {escape(seed.kv_self)}  |  cross {escape(seed.kv_cross)}",
        soft_wrap=True,
    )
    console.print(
        f"  this profile:    self {escape(profile.kv_self)}  |  cross {escape(profile.kv_cross)}",
        soft_wrap=True,
    )
    if seed.agrees:
        _print_indented(console, f"agrees: {seed.agrees}")
    if seed.differs_because:
        _print_indented(console, f"differs because: {seed.differs_because}")
    console.print("  reproduce the table's version:")
    console.print(f"    {escape(seed_command(profile))}", soft_wrap=True)


def _print_indented(console, text: str) -> None:
    """Text wrapped to the terminal with every line indented (plain text, no markup)."""
    console.print(Padding(escape(text), (0, 0, 0, 2), expand=False))


def seed_command(profile) -> str:
    """The transcribe command that runs the profile with its seed table's cache policies."""
    seed = profile.seed
    # Policies hold ';' and spaces; a valid one never holds a single quote.
    return (
        f"kvscribe FILE --backend transformers --profile {profile.name} "
        f"--kv-policy '{seed.kv_self}' --kv-cross '{seed.kv_cross}'"
    )


def _print_layers(console, profile) -> None:
    """The self-attention policy resolved per decoder layer of the default model, beside the
    seed table's version when the profile has one."""
    from kvscribe.kvcache.spec import parse_cross, parse_policy
    from kvscribe.models import resolve
    from kvscribe.models.ct2_file import whisper_dims

    seed = profile.seed
    try:
        model = resolve(None, ("ctranslate2",))
        layers = whisper_dims(model.path / "model.bin").n_text_layer
        specs = profile.self_specs(layers)
        cross = parse_cross(profile.kv_cross)
        seed_specs = parse_policy(seed.kv_self, layers) if seed else None
        seed_cross = parse_cross(seed.kv_cross) if seed else None
    except KvscribeError as exc:
        print_error(stderr_console(), exc)
        raise typer.Exit(exc.exit_code) from None
    console.print(f"transformers backend, {model.name} ({layers} decoder layers):")
    table = Table("", "this profile", *(["table's version"] if seed else []), box=None)
    for index, spec in enumerate(specs):
        table.add_row(
            f"layer {index}", spec.describe(), *([seed_specs[index].describe()] if seed else [])
        )
    table.add_row("cross-attention", cross.describe(), *([seed_cross.describe()] if seed else []))
    console.print(table)


def models_command() -> None:
    """List models that resolve without a network, and how to get the others."""
    from kvscribe.models import hub, list_models

    table = Table("model", "format", "status", "where / how to get it", box=None)
    rows = list_models()
    for row in rows:
        status = "[green]ready[/]" if row.available else "[yellow]not installed[/]"
        table.add_row(row.name, row.format, status, row.where)
    console = _stdout_console()
    console.print(table)
    listed = {row.name for row in rows}
    others = ", ".join(name for name in sorted(hub.short_names()) if name not in listed)
    console.print(
        f"\nThe others ({others}) download from the Hugging Face Hub on first use, e.g. "
        "`--model small`; or give a model folder or file with `--model PATH`."
    )


def _load_or_exit(name: str, resolve_auto: bool):
    from kvscribe import profile

    try:
        return profile.load(name, resolve_auto=resolve_auto)
    except KvscribeError as exc:
        print_error(stderr_console(), exc)
        raise typer.Exit(exc.exit_code) from None
