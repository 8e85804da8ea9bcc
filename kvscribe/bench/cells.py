"""The bench matrix: one cell per (backend or baseline, model, profile or policy, batch size)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvscribe import registry
from kvscribe.errors import UsageError
from kvscribe.kvcache.spec import validate_policy
from kvscribe.option_values import MAX_BATCH

PROFILES = ("cpu-laptop", "tiny-vram", "no-loss")
# Policies the seed claims are about (transformers backend, cpu-laptop's other settings).
CLAIM_POLICIES = ("window=256", "window=32", "sink=4,window=32", "full; half@layers=odd", "q8_0")
# Engines called directly, and the kvscribe backend each mirrors. faster-whisper's batched
# pipeline mirrors the ctranslate2 cell at its batch size (the profile's), the sequential
# transcribe the batch-1 cell (or the profile's when no batch sizes were asked).
BASELINES = {
    "faster-whisper": "ctranslate2",
    "faster-whisper-batched": "ctranslate2",
    "whisper-cli": "whispercpp",
}
BATCHED_BASELINES = ("faster-whisper-batched",)
# whisper.cpp's cache types beside cpu-laptop's F16 (the reference): Q8_0 and Q4_0 self +
# cross, and Q8_0 cross alone (kvscribe's patched whisper-cli, -kvs / -kvc).
WHISPERCPP_CACHE_TYPES = (("q8_0", "shared,q8_0"), ("q4_0", "shared,q4_0"), ("full", "shared,q8_0"))


def batches(backend: str) -> bool:
    """Whether `backend` has a batched long-form path (Capabilities.batched). One that has
    none ignores a batch size, so its cells run once, at the profile's, rather than as
    copies labelled with batch sizes they never used."""
    entry = registry.discover().get(backend)
    return bool(entry and entry.backend and entry.backend.capabilities.batched)


@dataclass(frozen=True)
class Cell:
    """What one column of results ran: a kvscribe backend, or an engine called directly."""

    kind: str  # "kvscribe" or a BASELINES engine
    backend: str  # the kvscribe backend (or the one a baseline mirrors)
    model: str | None
    profile: str
    kv_self: str | None = None  # overrides the profile's policy (transformers, whispercpp)
    kv_cross: str | None = None
    # Speech chunks decoded at once on audio over 30 s (1: sequential); None: the profile's.
    batch_size: int | None = None

    @property
    def label(self) -> str:
        if self.batch_size is None:
            return self.unbatched_label
        return f"{self.unbatched_label}, batch {self.batch_size}"

    @property
    def unbatched_label(self) -> str:
        """The label without the batch size: what the rows of one setting have in common."""
        name = self.kind if self.kind != "kvscribe" else self.backend
        what = self.profile
        if self.kv_self is not None:
            what = f"{self.kv_self} / {self.kv_cross}"
        model = f" [{self.model}]" if self.model else ""
        return f"{name}: {what}{model}"

    @property
    def is_reference(self) -> bool:
        """The full cache of its backend and model, that deltas are taken against."""
        if self.kind != "kvscribe":
            return False
        if self.backend == "transformers":
            return self.kv_self == "full" and self.kv_cross == "full"
        return self.profile == "cpu-laptop" and self.kv_self is None


def split_policies(values: list[str]) -> list[str]:
    """`--policy full,sink=4,window=32,q8_0` -> ["full", "sink=4,window=32,q8_0"]: a new
    policy starts at `full` or where a part's key repeats. Repeating --policy also works."""
    policies: list[str] = []
    for value in values:
        group: list[str] = []
        for part in (p.strip() for p in value.split(",") if p.strip()):
            key = part.split("=")[0].split("@")[0]
            keys = {g.split("=")[0].split("@")[0] for g in group}
            if group and (part == "full" or key in keys or "full" in keys):
                policies.append(",".join(group))
                group = []
            group.append(part)
        if group:
            policies.append(",".join(group))
    for policy in policies:
        try:
            validate_policy(policy)
        except UsageError as exc:  # named after bench's own flag, not transcribe's
            raise UsageError(exc.message, subject="--policy", hint=exc.hint) from None
    return policies


def parse_batch_sizes(values: list[str]) -> list[int]:
    """`--batch-sizes 1,8,16` (or repeated) -> [1, 8, 16]: each size once, in the order given."""
    sizes: list[int] = []
    for part in (p.strip() for value in values for p in value.split(",") if p.strip()):
        if not (part.isascii() and part.isdigit()) or not 1 <= int(part) <= MAX_BATCH:
            raise UsageError(
                f"{part!r} is not a batch size",
                subject="--batch-sizes",
                hint=f"whole numbers from 1 to {MAX_BATCH}, e.g. --batch-sizes 1,8,16",
            )
        if int(part) not in sizes:
            sizes.append(int(part))
    if not sizes:
        raise UsageError("names no batch size", subject="--batch-sizes", hint="e.g. 1,8,16")
    return sizes


def matrix(
    backends: list[str],
    profiles: list[str],
    policies: list[str] | None,
    models: list[str | None],
    baseline: bool,
    batch_sizes: list[int] | None = None,
) -> list[Cell]:
    """Every cell, references first so they warm up first; with `batch_sizes`, every cell of
    a backend with a batch path once per size, side by side."""
    if policies and "transformers" not in backends:
        raise UsageError(
            "cache policies are run by the transformers backend",
            subject="--policy",
            hint="add --backend transformers (pip install -e '.[transformers]')",
        )
    if batch_sizes and not any(batches(name) for name in backends):
        batching = [name for name in sorted(registry.discover()) if batches(name)]
        raise UsageError(
            "batch sizes are run by the " + " and ".join(batching) + " backends"
            if batching
            else "batch sizes are run by no backend installed here",
            subject="--batch-sizes",
            hint="add --backend " + " or --backend ".join(batching)
            if batching
            else "leave out --batch-sizes",
        )
    cells: list[Cell] = []
    for model in models:
        for backend in backends:
            cells += _at_batch_sizes(_settings_of(backend, model, profiles, policies), batch_sizes)
        if baseline:
            cells += [
                Cell(kind, mirrored, model, "cpu-laptop")
                for kind, mirrored in BASELINES.items()
                if mirrored in backends
            ]
    return cells


def _settings_of(
    backend: str, model: str | None, profiles: list[str], policies: list[str] | None
) -> list[Cell]:
    """One backend's cells for one model, before batch sizes: its full-cache reference (the
    transformers backend's), its profiles, then the policies (transformers) or the cache
    types (whispercpp)."""
    cells: list[Cell] = []
    if backend == "transformers":
        cells.append(Cell("kvscribe", backend, model, "cpu-laptop", "full", "full"))
    cells += [Cell("kvscribe", backend, model, profile) for profile in profiles]
    if backend == "transformers":
        chosen = CLAIM_POLICIES if policies is None else policies
        shared = "shared"  # cpu-laptop's cross-attention policy
        cells += [
            Cell("kvscribe", backend, model, "cpu-laptop", policy, shared)
            for policy in chosen
            if policy != "full"
        ]
    if backend == "whispercpp":
        cells += [
            Cell("kvscribe", backend, model, "cpu-laptop", kv_self, kv_cross)
            for kv_self, kv_cross in WHISPERCPP_CACHE_TYPES
        ]
    return cells


def _at_batch_sizes(cells: list[Cell], batch_sizes: list[int] | None) -> list[Cell]:
    """Each cell once per batch size (its rows next to each other), where it can batch."""
    if not batch_sizes:
        return cells
    return [
        dataclasses.replace(cell, batch_size=size)
        for cell in cells
        for size in (batch_sizes if batches(cell.backend) else [None])
    ]


def mirror_of(cell: Cell, cells: list[Cell]) -> Cell | None:
    """The kvscribe cell a baseline runs the same options as: sequential decoding, as the
    engine called directly does (batch 1, or the profile's when no batch sizes were asked);
    a batched baseline, the cell at the profile's batch size (or the largest asked)."""
    if cell.kind == "kvscribe":
        return None
    same = [
        other
        for other in cells
        if (other.kind, other.backend, other.model, other.profile, other.kv_self)
        == ("kvscribe", cell.backend, cell.model, cell.profile, None)
    ]
    if cell.kind in BATCHED_BASELINES:
        batched = [other for other in same if other.batch_size != 1]
        return max(batched, key=lambda other: other.batch_size or 0, default=None)
    return next((other for other in same if other.batch_size in (None, 1)), None)
