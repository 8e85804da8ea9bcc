"""What a batch may not write over: an input (a recording named `a.txt`, whose `-f txt`
output would be `a.txt` in the same folder), the transcript of another input that an
earlier run into the same output folder wrote under the same name (`in/a/cards.wav` then
`in/b/cards.wav`, each run given one folder: both are `cards.txt`), or a file no run into
the folder wrote (the user's notes `talk.txt` beside `talk.wav`, with the folder as its
own output folder). Each would lose something for good; the input is failed instead,
with the fix (--force replaces the transcript or the file, never an input). What kvscribe
wrote is what the folder's manifest names, a "writing" record's outputs included."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from kvscribe.audio.stdin import SPOOL_PREFIX
from kvscribe.errors import KvscribeError, OutputError
from kvscribe.inputs import Input
from kvscribe.manifest import Manifest, fingerprint


class OutputGuard:
    def __init__(self, folder: Path, formats, inputs: list[Input], manifest: Manifest, force: bool):
        self.folder, self.formats, self.force = folder, formats, force
        self.inputs = {os.path.realpath(entry.path) for entry in inputs}
        self.owners = {
            output: (source, record)
            for source, record in manifest.records.items()
            if record.status == "done"
            for output in record.outputs
        }
        self.written = {output for record in manifest.records.values() for output in record.outputs}

    def conflict(self, path: Path, bases: dict[Path, PurePosixPath]) -> KvscribeError | None:
        """Why `path`'s outputs may not be written, or None."""
        for fmt in self.formats:
            output = f"{bases[path]}.{fmt}"
            target = self.folder / output
            if os.path.realpath(target) in self.inputs:
                return OutputError(
                    f"its {fmt} output would replace the input {target}",
                    subject=str(path),
                    hint="choose another --output-dir",
                )
            owner = None if self.force else self.owners.get(output)
            if owner is not None and owner[0] != os.path.abspath(path) and not _moved(path, *owner):
                return OutputError(
                    f"{target} holds the transcript of {_described(owner[0])}, from an earlier "
                    "run into this folder",
                    subject=str(path),
                    hint="choose another --output-dir, give both in one run (their outputs then "
                    "get names of their own), or --force to replace it",
                )
            if not self.force and output not in self.written and os.path.lexists(target):
                return OutputError(
                    f"{target} exists, and no kvscribe run into this folder wrote it",
                    subject=str(path),
                    hint="move it or choose another --output-dir, or --force to replace it",
                )
        return None


def _described(source: str) -> str:
    """An earlier input as the user knows it: a pipe's audio was spooled to a temporary file."""
    if Path(source).parent.name.startswith(SPOOL_PREFIX):
        return "audio piped in"
    return source


def _moved(path: Path, source: str, record) -> bool:
    """The earlier input is gone and this one has its bytes: the same recording, moved."""
    if os.path.exists(source) or record.fingerprint is None:
        return False
    now = fingerprint(path)
    return now is not None and now.sha256 == record.fingerprint.sha256
