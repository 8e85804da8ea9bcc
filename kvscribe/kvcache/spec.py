"""The cache-policy language: parse `--kv-policy` / profile strings into per-layer specs.

    policy   := clause (";" clause)*
    clause   := part ("," part)* ["@" selector]
    part     := full | half | window=N | sink=N | q8_0 | q4_0 | residual=N
    selector := layers=odd | layers=even | layers=N | layers=A-B | layers(>=|>|<=|<)N

Clauses apply in order, each to the layers it selects (all when no selector);
a later clause overrides only the settings it names (`full` resets a layer).
A selector must pick at least one of the model's layers, and `residual=N` (the newest
N tokens kept unquantized) needs `q8_0` or `q4_0`: a part that would do nothing is an error.
Examples: `sink=4,window=128` / `full; half@layers=odd` / `sink=4,window=64,q8_0@layers>=2`.

Cross-attention policies: `full` (one copy per beam), `shared` (one copy for all
beams), optionally with `q8_0` or `q4_0` (`shared,q8_0`). Pure Python: no torch import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from kvscribe.errors import UsageError

QUANTS = ("q8_0", "q4_0")
DEFAULT_RESIDUAL = 0  # newest tokens kept in full precision (the current one always is)
_ANY_MODEL_LAYERS = 64  # for syntax checks: more decoder layers than any Whisper (large: 32)


@dataclass(frozen=True)
class LayerSpec:
    """How one decoder layer keeps its self-attention past."""

    half: bool = False  # keep layer inputs (d per token) and recompute K/V, instead of K and V
    sink: int = 0  # first tokens always kept
    window: int | None = None  # newest tokens kept; None keeps everything
    quant: str | None = None  # None, "q8_0" or "q4_0"
    residual: int = DEFAULT_RESIDUAL

    @property
    def trims(self) -> bool:
        return self.window is not None

    def describe(self) -> str:
        parts = ["half" if self.half else "kv"]
        if self.trims:
            parts.append(
                f"sink={self.sink},window={self.window}" if self.sink else f"window={self.window}"
            )
        if self.quant:
            parts.append(f"{self.quant}(residual={self.residual})" if self.residual else self.quant)
        return " ".join(parts) if len(parts) > 1 or self.half else "full"


@dataclass(frozen=True)
class CrossSpec:
    shared: bool = False
    quant: str | None = None

    def describe(self) -> str:
        text = "shared" if self.shared else "per-beam"
        return f"{text},{self.quant}" if self.quant else text


def parse_policy(text: str, n_layers: int) -> tuple[LayerSpec, ...]:
    """Per-layer specs for a decoder of `n_layers`; UsageError names the bad part, including
    a selector that picks none of the model's layers (a clause that would do nothing)."""
    return _parse(text, n_layers, model_known=True)


def validate_policy(text: str) -> None:
    """Check a policy's syntax without knowing the model (for early, torch-free errors);
    whether each selector picks a layer is checked once the model is, in parse_policy."""
    _parse(text, _ANY_MODEL_LAYERS, model_known=False)


def _parse(text: str, n_layers: int, model_known: bool) -> tuple[LayerSpec, ...]:
    layers = [LayerSpec() for _ in range(n_layers)]
    for clause in filter(None, (c.strip() for c in text.split(";"))):
        body, _, selector = clause.partition("@")
        chosen = _select(selector.strip(), n_layers, text) if selector else range(n_layers)
        if model_known and not chosen:
            raise _bad(
                selector.strip(),
                text,
                f"selects no layer of this model (its decoder layers are 0-{n_layers - 1})",
            )
        updates = [_part(p.strip(), text) for p in body.split(",") if p.strip()]
        if not updates:
            raise _bad(clause, text, "an empty clause")
        for index in chosen:
            for update in updates:
                layers[index] = update(layers[index])
    for index, spec in enumerate(layers):
        _check(spec, index, text)
    return tuple(layers)


def parse_cross(text: str) -> CrossSpec:
    spec = CrossSpec()
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part == "full":
            spec = CrossSpec()
        elif part == "shared":
            spec = replace(spec, shared=True)
        elif part in QUANTS:
            spec = replace(spec, quant=part)
        else:
            raise UsageError(
                f"unknown cross-attention policy part {part!r}",
                subject="--kv-cross",
                hint="use full, shared, q8_0, q4_0 (e.g. shared,q8_0)",
            )
    return spec


def _part(part: str, text: str):
    name, _, value = part.partition("=")
    if name == "full" and not value:
        return lambda s: LayerSpec()
    if name == "half" and not value:
        return lambda s: replace(s, half=True)
    if name in QUANTS and not value:
        return lambda s: replace(s, quant=name)
    if name in ("window", "sink", "residual"):
        number = _number(value, part, text, minimum=1 if name == "window" else 0)
        return lambda s: replace(s, **{name: number})
    raise _bad(
        part, text, "an unknown setting (use full, half, window=N, sink=N, q8_0, q4_0, residual=N)"
    )


def _select(selector: str, n_layers: int, text: str) -> list[int]:
    match = re.fullmatch(r"layers\s*(>=|<=|>|<|=)\s*(\S+)", selector)
    if not match:
        raise _bad(selector, text, "a bad layer selector (e.g. layers=odd, layers>=2, layers=0-1)")
    op, value = match.groups()
    all_layers = range(n_layers)
    if op == "=":
        if value in ("odd", "even"):
            return [i for i in all_layers if i % 2 == (value == "odd")]
        low, _, high = value.partition("-")
        first = _number(low, selector, text)
        last = _number(high, selector, text) if high else first
        return [i for i in all_layers if first <= i <= last]
    bound = _number(value, selector, text)
    tests = {">=": bound.__le__, ">": bound.__lt__, "<=": bound.__ge__, "<": bound.__gt__}
    return [i for i in all_layers if tests[op](i)]


def _number(value: str, part: str, text: str, minimum: int = 0) -> int:
    if not value.isdigit() or int(value) < minimum:
        raise _bad(part, text, f"not a whole number >= {minimum}")
    return int(value)


def _check(spec: LayerSpec, index: int, text: str) -> None:
    if spec.half and spec.quant:
        raise _bad(
            f"half + {spec.quant} on layer {index}",
            text,
            "a conflict: a half layer keeps inputs, not K/V, so there is nothing to quantize",
        )
    if spec.sink and not spec.trims:
        raise _bad(
            f"sink={spec.sink} on layer {index}", text, "sinks without a window (add window=N)"
        )
    if spec.residual and not spec.quant:
        raise _bad(
            f"residual={spec.residual} on layer {index}",
            text,
            "a residual keeps the newest tokens unquantized, so it needs q8_0 or q4_0",
        )


def _bad(part: str, text: str, why: str) -> UsageError:
    return UsageError(
        f"bad cache policy part {part!r}: {why}",
        subject=f"--kv-policy {text!r}",
        hint="see `kvscribe profiles show NAME` for working examples",
    )
