"""kvscribe's cache-policy language mapped onto what (patched) whisper.cpp can do: one storage
type for the whole self-attention cache and one for the cross-attention cache, each F16,
Q8_0 or Q4_0 (backends/whispercpp/kv-cache-types.patch).

whisper.cpp always allocates the whole text context (448 positions, padded to 512) for every
layer, and one cross-attention cache per whisper state that all beams share; windows, sinks,
half layers, a full-precision residual and per-layer types have no counterpart there.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe.kvcache.spec import LayerSpec, parse_cross

F16 = "f16"
KV_TYPES = (F16, "q8_0", "q4_0")
# ggml type -> (bytes per block, values per block): ggml's block layouts (ggml-common.h).
BLOCKS = {F16: (2, 1), "q8_0": (34, 32), "q4_0": (18, 32)}
CONTEXT_PAD = 256  # whisper.cpp pads each cache's positions to a multiple of 256


@dataclass(frozen=True)
class CacheTypes:
    """The -kvs / -kvc values for a run, and the policy parts whisper.cpp cannot honour."""

    self_type: str = F16
    cross_type: str = F16
    not_applicable: tuple[str, ...] = ()

    @property
    def quantized(self) -> bool:
        return self.self_type != F16 or self.cross_type != F16

    def describe(self) -> str:
        return f"self {self.self_type}, cross {self.cross_type}"


def from_policy(specs: tuple[LayerSpec, ...], kv_self: str, kv_cross: str) -> CacheTypes:
    """Map a self-attention policy (`specs`, one per decoder layer, parsed from `kv_self`)
    and a cross-attention policy."""
    notes = []
    quants = {spec.quant for spec in specs}
    self_type = F16
    if len(quants) == 1:
        self_type = next(iter(quants)) or F16
    else:
        notes.append(
            f"self-attention policy '{kv_self}': per-layer cache types (whisper.cpp has one "
            "type for every layer; kept F16)"
        )
    if any(spec.trims for spec in specs):
        notes.append(
            f"self-attention policy '{kv_self}': window/sink (whisper.cpp allocates the whole "
            "text context; -mc only limits the previous-text prompt)"
        )
    if any(spec.half for spec in specs):
        notes.append(f"self-attention policy '{kv_self}': half layers (whisper.cpp keeps K and V)")
    if any(spec.residual for spec in specs):
        notes.append(
            f"self-attention policy '{kv_self}': residual (whisper.cpp quantizes every position)"
        )
    cross = parse_cross(kv_cross)
    if not cross.shared:
        notes.append(
            f"cross-attention policy {cross.describe()!r}: whisper.cpp keeps one copy per "
            "state, which its beams share"
        )
    return CacheTypes(self_type, cross.quant or F16, tuple(notes))


def without_types(wanted: CacheTypes, why: str) -> CacheTypes:
    """F16 caches for a whisper-cli that cannot store others, with the reason recorded."""
    notes = list(wanted.not_applicable)
    if wanted.self_type != F16:
        notes.append(f"self-attention type {wanted.self_type}: {why}")
    if wanted.cross_type != F16:
        notes.append(f"cross-attention type {wanted.cross_type}: {why}")
    return CacheTypes(F16, F16, tuple(notes))


def cache_bytes(kind: str, n_state: int, n_layers: int, positions: int) -> int:
    """Bytes whisper.cpp allocates for one cache (K and V) of `kind` over `positions`
    (padded to 256 as whisper.cpp does): n_state values per position and layer."""
    block_bytes, block_values = BLOCKS[kind]
    padded = -(-positions // CONTEXT_PAD) * CONTEXT_PAD
    return 2 * n_layers * padded * (n_state // block_values) * block_bytes
