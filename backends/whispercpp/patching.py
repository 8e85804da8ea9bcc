"""kvscribe's changes to whisper.cpp, kept as unified diffs beside this module and applied
to the unpacked source before it is built.

The applier is strict: every hunk must match the source exactly at its stated line, so a
patch written for another whisper.cpp version fails loudly instead of landing elsewhere.
Pure Python: no `patch` or `git` binary is needed on the user's machine.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

# Applied in this order. kv-cache-types.patch: F16 / Q8_0 / Q4_0 self- and cross-attention
# caches (whisper_context_params.kv_self_type / kv_cross_type, whisper-cli -kvs / -kvc).
# flash-attn-quantized-kv.patch: ggml-cpu's fast flash-attention paths (tiled for many
# queries, split-KV for one query over many keys) read Q8_0 / Q4_0 K/V too, dequantizing
# each tile as they pack it; unpatched, quantized caches take the slow one-row path.
# no-speech-logits-row.patch: the no-speech probability is read from the start token's
# logits row, not a stale row 0, when previous text or a prompt precedes it (upstream
# ggml-org/whisper.cpp#3945); unpatched, silence after speech is decoded, not skipped.
# barrier-yield.patch: a thread waiting at one of ggml's barriers (one per graph node) spins
# briefly, then yields its core at each look; unpatched it only spins, so on cores busy with
# other work it holds the core the thread it waits for needs (docs/backends.md).
PATCHES = (
    "kv-cache-types.patch",
    "flash-attn-quantized-kv.patch",
    "no-speech-logits-row.patch",
    "barrier-yield.patch",
)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch does not apply to this source."""


@dataclass
class _Hunk:
    old_start: int  # 1-based line in the original file
    old_left: int  # lines of the original still to read into this hunk
    new_left: int  # lines of the result still to read
    lines: list[str] = field(default_factory=list)  # " x", "-x", "+x" (marker + text)

    def wants(self, marker: str) -> bool:
        """Whether a line with this marker still belongs to the hunk (the header's counts
        decide, so a removed line that looks like `--- a/file` is read as a line)."""
        if marker == " ":
            return self.old_left > 0 and self.new_left > 0
        return (self.old_left if marker == "-" else self.new_left) > 0

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.old_left -= line[0] in (" ", "-")
        self.new_left -= line[0] in (" ", "+")


@dataclass
class _FilePatch:
    path: str
    hunks: list[_Hunk] = field(default_factory=list)


def patch_texts() -> dict[str, str]:
    """Patch file name -> its text, as shipped in the package."""
    folder = resources.files("kvscribe.backends.whispercpp")
    return {name: folder.joinpath(name).read_text(encoding="utf-8") for name in PATCHES}


def patches_digest() -> str:
    """A short hash of every patch's bytes: part of the build's cache key, so a changed
    patch gives a new build directory and `kvscribe setup whisper-cpp` rebuilds."""
    digest = hashlib.sha256()
    for name, text in patch_texts().items():
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()[:12]


def apply_all(source: Path) -> list[str]:
    """Apply every patch to the whisper.cpp tree at `source`; returns the files changed."""
    changed = []
    for name, text in patch_texts().items():
        try:
            changed += apply(text, source)
        except PatchError as exc:
            raise PatchError(f"{name}: {exc}") from None
    return changed


def apply(diff: str, root: Path) -> list[str]:
    """Apply a unified diff (paths a/... b/...) under `root`; every file is checked before
    any is written, so a failing patch leaves the tree as it was."""
    results = {}
    for file_patch in _parse(diff):
        target = root / file_patch.path
        if not target.is_file():
            raise PatchError(f"no file {file_patch.path}")
        original = target.read_text(encoding="utf-8").split("\n")
        results[target] = "\n".join(_patched(original, file_patch))
    for target, text in results.items():
        target.write_text(text, encoding="utf-8")
    return [str(path.relative_to(root)) for path in results]


def _parse(diff: str) -> list[_FilePatch]:
    files: list[_FilePatch] = []
    hunk: _Hunk | None = None
    for line in diff.split("\n"):
        if hunk is not None and line[:1] in (" ", "-", "+") and hunk.wants(line[0]):
            hunk.add(line)
        elif line.startswith("+++ "):
            files.append(_FilePatch(line[4:].strip().removeprefix("b/")))
        elif match := _HUNK.match(line):
            if not files:
                raise PatchError("a hunk comes before any file header")
            old, new = (1 if n is None else int(n) for n in (match[2], match[4]))
            hunk = _Hunk(int(match[1]), old, new)
            files[-1].hunks.append(hunk)
    if any(h.old_left or h.new_left for f in files for h in f.hunks):
        raise PatchError("a hunk is shorter than its header says")
    return files


def _patched(original: list[str], file_patch: _FilePatch) -> list[str]:
    out: list[str] = []
    cursor = 0  # next original line (0-based) not yet copied
    for hunk in file_patch.hunks:
        start = hunk.old_start - 1
        if start < cursor:
            raise PatchError(f"{file_patch.path}: hunks overlap at line {hunk.old_start}")
        out += original[cursor:start]
        position = start
        for line in hunk.lines:
            marker, text = line[0], line[1:]
            if marker in (" ", "-"):
                found = original[position] if position < len(original) else None
                if found != text:
                    raise PatchError(
                        f"{file_patch.path}: line {position + 1} differs from the patch "
                        f"(expected {text.strip()[:60]!r})"
                    )
                position += 1
            if marker in (" ", "+"):
                out.append(text)
        cursor = position
    return out + original[cursor:]
