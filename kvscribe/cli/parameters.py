"""A command's parameters as data: one table, name -> (type, typer.Option or Argument).

typer reads a command's parameters from its signature; `takes(TABLE)` gives a command
written as `def command(**given)` the signature the table lists, so the table, not a
long parameter list, is where a flag is declared, and `option_values` passes every
parameter named like a field of the command's options on, unspelled.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any

ParameterTable = dict[str, tuple[Any, Any]]


def takes(table: ParameterTable) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give the decorated `command(**given)` the parameters `table` lists, in its order."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=kind
                )
                for name, (kind, info) in table.items()
            ],
            return_annotation=None,
        )
        command.__annotations__ = {name: kind for name, (kind, _) in table.items()}
        command.__annotations__["return"] = None
        return command

    return decorate


def option_values(given: dict[str, Any], options: type) -> dict[str, Any]:
    """The parameters `given` to a command that are fields of its `options` dataclass."""
    names = {field.name for field in fields(options)}
    return {name: value for name, value in given.items() if name in names}
