"""Checking one of kvscribe's patches to whisper.cpp without its source: the patch's own
context lines, placed at their stated line numbers in a file of filler, take it exactly
once (the real source is patched, strictly, by the build the whispercpp lane runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscribe.backends.whispercpp import patching


def applied_once(name: str, folder: Path) -> tuple[str, str]:
    """The file `name` patches (its path) and that file's text once patched; fails the test
    unless the patch applies once and is refused a second time."""
    text = patching.patch_texts()[name]
    (file_patch,) = patching._parse(text)
    assert all(hunk.lines for hunk in file_patch.hunks)
    lines: list[str] = []
    for hunk in file_patch.hunks:  # the original: filler, then each hunk's old lines
        lines += [f"// line {n}" for n in range(len(lines) + 1, hunk.old_start)]
        lines += [line[1:] for line in hunk.lines if line[0] in " -"]
    target = folder / file_patch.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join([*lines, "// end"]), encoding="utf-8")
    assert patching.apply(text, folder) == [file_patch.path]
    patched = target.read_text(encoding="utf-8")
    with pytest.raises(patching.PatchError):
        patching.apply(text, folder)  # applied already: the context no longer matches
    return file_patch.path, patched
