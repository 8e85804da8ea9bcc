"""openai-whisper's and faster-whisper's spellings of kvscribe's flags, accepted quietly.

`--output_dir out` is `--output-dir out`, and their booleans that take a value
(`--word_timestamps True`, `--condition_on_previous_text False`) become kvscribe's
switches. The aliases stay out of `--help`: one spelling is documented, both work.
openai-whisper's `--fp16` and `--verbose` are taken and left out (kvscribe makes those
choices itself); its flags for what kvscribe does not do are refused by name, with why.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
# openai-whisper's flags for what kvscribe chooses itself, taken with their value and left
# out, so the scripts that pass them keep working: `--fp16 False` (the compute type
# follows the device, --compute-type) and `--verbose False` (segments print to a
# terminal, -q prints none).
_CHOSEN_HERE = {"--fp16": _TRUE | _FALSE, "--verbose": _TRUE | _FALSE | {"none"}}
# openai-whisper's flags for what kvscribe does not do: refused by name, with why.
_NOT_HERE = {
    "--patience": "kvscribe's beam search ends as faster-whisper's does (patience 1)",
    "--length_penalty": "kvscribe ranks finished beams as faster-whisper does",
    "--model_dir": "models live in kvscribe's cache (KVSCRIBE_CACHE_DIR); "
    "--model also takes a model's folder",
    "--carry_initial_prompt": "--initial-prompt prompts the first window only",
    "--prepend_punctuations": "words take their punctuation as faster-whisper's do",
    "--append_punctuations": "words take their punctuation as faster-whisper's do",
}


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
        if name in _NOT_HERE and name not in known:
            raise _usage_error(f"{name} is openai-whisper's, not kvscribe's: {_NOT_HERE[name]}")
        if name in _CHOSEN_HERE and name not in known:
            if _left_out_with_the_next(name, equals, value, args[index + 1 : index + 2]):
                next(pending)  # its value goes with it
            continue
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


def _left_out_with_the_next(name: str, equals: str, value: str, following: list[str]) -> bool:
    """One of _CHOSEN_HERE left out: whether the argument after it is its value (a bad
    `--fp16=maybe` is a usage error)."""
    allowed = _CHOSEN_HERE[name]
    if equals:
        if value.lower() not in allowed:
            raise _usage_error(f"{name} takes True or False, not {value!r}")
        return False
    return bool(following) and following[0].lower() in allowed


def _usage_error(message: str) -> Exception:
    # Typer carries its own copy of click: its UsageError is BadParameter's base.
    return typer.BadParameter.__mro__[1](message)


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
        f"takes True or False, not {value!r}", param_hint="--" + flag[2:].replace("-", "_")
    )
