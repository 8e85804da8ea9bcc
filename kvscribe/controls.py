"""Decoding controls: the optional decoding options, each declared once, here.

A declaration gives a control's flag, type, default, help and check. From it come the
`transcribe` and `mic` flags (kvscribe.cli.shared_options), the EngineOptions field and its
part in a batch's resume key (kvscribe.options), the value each DecodeRequest gets
(`to_request`), the "not applicable" row of a backend that cannot honour it
(kvscribe.contract.OPTIONAL_FIELDS) and its line in docs/cli.md (generated from --help).

Adding a control takes its declaration here, its DecodeRequest field (named as the
control), and the engines that honour it: a backend whose `Capabilities.honours` does not
name it reports it "not applicable" and decodes without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvscribe.errors import UsageError

# Whisper's 448-token text context less its longest prompt (223 previous tokens, the
# start-of-previous and start sequences, the no-timestamps token).
MAX_NEW_TOKENS = 220


def in_range(flag: str, value: float, low: float, high: float, why: str = "") -> None:
    """A UsageError naming `flag` unless low <= value <= high; `why` follows the bounds."""
    if not low <= value <= high:
        raise UsageError(
            f"must be between {low:g} and {high:g}{why}", subject=flag, hint=f"got {value}"
        )


def suppressed_ids(text: str) -> tuple[int, ...]:
    """`--suppress-tokens "-1,50363"` -> (-1, 50363): token ids, -1 the model's own list."""
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        ids = ()
    if not ids or any(token < -1 for token in ids):
        raise UsageError(
            "must be comma-separated token ids (-1: the model's own list)",
            subject="--suppress-tokens",
            hint=f"got {text!r}; e.g. -1 or -1,50363",
        )
    return ids


def _between(low: float, high: float, why: str = "") -> Callable[[str, Any], None]:
    return lambda flag, value: in_range(flag, value, low, high, why)


def _not_blank(flag: str, value: str) -> None:
    if not value.strip():
        raise UsageError("is empty", subject=flag, hint="give words, or leave it out")


def _token_ids(flag: str, text: str) -> None:
    suppressed_ids(text)


def _as_given(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Control:
    name: str  # the EngineOptions and DecodeRequest field, and the resume key's entry
    flag: str
    kind: type  # the type the flag's value has (None is always allowed where default is None)
    default: Any
    help: str
    check: Callable[[str, Any], None] | None = None  # given the flag and a value not None
    to_request: Callable[[Any], Any] = _as_given  # the option's value -> the request's
    show_default: str | None = None  # what --help says the default is, where not `default`
    metavar: str | None = None
    mic: dict[str, Any] = field(default_factory=dict)  # typer.Option arguments `mic` differs in

    def validate(self, value: Any) -> None:
        if value is not None and self.check is not None:
            self.check(self.flag, value)


CONTROLS = (
    Control(
        "hotwords",
        "--hotwords",
        str,
        None,
        "Words to favour (names, terms), given to the decoder before any previous text.",
        check=_not_blank,
        metavar="TEXT",
    ),
    Control(
        "max_new_tokens",
        "--max-new-tokens",
        int,
        None,
        "At most this many tokens per 30 s window.",
        check=_between(1, MAX_NEW_TOKENS, " (room for the longest prompt)"),
        show_default="none: what the 448-token context leaves after the prompt",
        mic={
            "help": "At most this many tokens per decode of the buffer.",
            "show_default": "12 per second of buffer, and 16",
        },
    ),
    Control(
        "suppress_tokens",
        "--suppress-tokens",
        str,
        "-1",
        "Token ids never decoded, comma-separated; -1 is the model's own list of symbols.",
        check=_token_ids,
        to_request=suppressed_ids,
    ),
    Control(
        "hallucination_silence_threshold",
        "--hallucination-silence-threshold",
        float,
        None,
        "With word times: skip a silence longer than this (s) around a likely hallucination.",
        check=_between(0, 30),
        show_default="off",
    ),
    Control(
        "repetition_penalty",
        "--repetition-penalty",
        float,
        1.0,
        "Penalise the tokens already decoded in a window by this factor (above 1: fewer "
        "loops of repeated words).",
        check=_between(1.0, 5.0),
    ),
)
