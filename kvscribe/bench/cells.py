"""The bench matrix: one cell per (backend or baseline, model, profile or policy)."""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe.errors import UsageError
from kvscribe.kvcache.spec import validate_policy

PROFILES = ("cpu-laptop", "tiny-vram", "no-loss")
# Policies the seed claims are about (transformers backend, cpu-laptop's other settings).
CLAIM_POLICIES = ("window=256", "window=32", "sink=4,window=32", "full; half@layers=odd", "q8_0")
BASELINES = {"faster-whisper": "ctranslate2", "whisper-cli": "whispercpp"}


@dataclass(frozen=True)
class Cell:
    """What one column of results ran: a kvscribe backend, or an engine called directly."""

    kind: str  # "kvscribe", "faster-whisper" or "whisper-cli"
    backend: str  # the kvscribe backend (or the one a baseline mirrors)
    model: str | None
    profile: str
    kv_self: str | None = None  # overrides the profile's policy (transformers cells)
    kv_cross: str | None = None

    @property
    def label(self) -> str:
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
        validate_policy(policy)
    return policies


def matrix(
    backends: list[str],
    profiles: list[str],
    policies: list[str] | None,
    models: list[str | None],
    baseline: bool,
) -> list[Cell]:
    """Every cell, references first so they warm up first."""
    if policies and "transformers" not in backends:
        raise UsageError(
            "cache policies are run by the transformers backend",
            subject="--policy",
            hint="add --backend transformers (pip install -e '.[transformers]')",
        )
    cells: list[Cell] = []
    for model in models:
        for backend in backends:
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
        if baseline:
            cells += [
                Cell(kind, mirrored, model, "cpu-laptop")
                for kind, mirrored in BASELINES.items()
                if mirrored in backends
            ]
    return cells


def mirror_of(cell: Cell, cells: list[Cell]) -> Cell | None:
    """The kvscribe cell a baseline runs the same options as."""
    if cell.kind == "kvscribe":
        return None
    for other in cells:
        if (other.kind, other.backend, other.model, other.profile, other.kv_self) == (
            "kvscribe",
            cell.backend,
            cell.model,
            cell.profile,
            None,
        ):
            return other
    return None
