"""openai-whisper's and faster-whisper's spellings of kvscribe's flags, accepted quietly.

`--output_dir out` is `--output-dir out`, and their booleans that take a value
(`--word_timestamps True`, `--condition_on_previous_text False`) become kvscribe's
switches. The aliases stay out of `--help`: one spelling is documented, both work.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


class SnakeCaseAliases(TyperCommand):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite(args, self.params))


def rewrite(args: list[str], params: list[Any]) -> list[str]:
    """`--some_flag[=value]` -> kvscribe's `--some-flag` wherever that flag exists."""
    switches = _switches(params)
    known = {name for p in params if _is_option(p) for name in p.opts}
    out: list[str] = []
    pending = iter(range(len(args)))
    for index in pending:
        arg = args[index]
        if arg == "--":  # everything after is a file name
            out.extend(args[index:])
            break
        name, equals, value = arg.partition("=")
        kebab = name.replace("_", "-")
        if not name.startswith("--") or "_" not in name or kebab not in known:
            out.append(arg)
            continue
        if kebab in switches:
            # openai-whisper's booleans always take a value: so does their spelling here.
            if not equals and index + 1 < len(args) and not args[index + 1].startswith("-"):
                value, equals = args[index + 1], "="
                next(pending)  # the value was consumed with the flag
            switched = _switch(kebab, value if equals else "true", switches[kebab])
            out.extend([switched] if switched else [])
        else:
            out.append(kebab + equals + value)
    return out


def _is_option(param: Any) -> bool:
    # Typer carries its own copy of click: compare by kind, not by class.
    return getattr(param, "param_type_name", None) == "option"


def _switches(params: list[Any]) -> dict[str, str | None]:
    """Boolean flags -> their off switch (`--no-...`), or None where there is none."""
    found: dict[str, str | None] = {}
    for param in params:
        if _is_option(param) and param.is_flag:
            off = param.secondary_opts[0] if param.secondary_opts else None
            for name in param.opts:
                found[name] = off
    return found


def _switch(flag: str, value: str, off: str | None) -> str:
    if value.lower() in _TRUE:
        return flag
    if value.lower() in _FALSE:
        if off is None:  # a flag that is off unless given: False means leave it out
            return ""
        return off
    raise typer.BadParameter(
        f"takes True or False, not {value!r}", param_hint=flag.replace("-", "_")
    )
