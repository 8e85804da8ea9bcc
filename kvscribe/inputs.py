"""What to transcribe: files and folders as given, `--files-from` lists, `--recursive`,
`--glob` filters, audio recognised by content; and where each one's outputs go.

Outputs mirror the inputs' tree under the output folder: each input's path
relative to the deepest folder that holds every input, so two folders'
`a.wav` never meet, and no name can point outside the output folder.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kvscribe.audio import AUDIO_EXTENSIONS, check_readable
from kvscribe.errors import InputNotFoundError, KvscribeError, UsageError

# Leading bytes of containers FFmpeg reads, for files whose name does not say "audio".
_MAGIC = (
    (0, b"RIFF"),  # wav, avi
    (0, b"fLaC"),
    (0, b"OggS"),
    (0, b"ID3"),  # mp3 with a tag
    (0, b"\xff\xfb"),  # mp3 frame sync (MPEG-1 layer III)
    (0, b"\xff\xf3"),
    (0, b"\xff\xf2"),
    (0, b"\xff\xf1"),  # aac adts
    (0, b"\xff\xf9"),
    (4, b"ftyp"),  # mp4, m4a, mov, 3gp
    (0, b"\x1a\x45\xdf\xa3"),  # matroska, webm
    (0, b"FORM"),  # aiff
    (0, b"#!AMR"),
    (0, b"\x30\x26\xb2\x75"),  # asf (wma)
    (0, b"caff"),
)


@dataclass(frozen=True)
class Selection:
    """How folders are searched."""

    recursive: bool = False
    globs: tuple[str, ...] = ()  # fnmatch patterns; a leading "!" excludes

    def wants(self, relative: PurePosixPath) -> bool:
        includes = [g for g in self.globs if not g.startswith("!")]
        excludes = [g[1:] for g in self.globs if g.startswith("!")]
        text = relative.as_posix()
        if any(_match(text, relative.name, g) for g in excludes):
            return False
        return not includes or any(_match(text, relative.name, g) for g in includes)


def _no_audio_in(
    folder: Path, selection: Selection, filtered: int, subfolders: bool
) -> InputNotFoundError:
    """Why a folder gave nothing to transcribe, and the fix that applies here."""
    if filtered:
        return InputNotFoundError(
            f"no audio file matches --glob ({filtered} left out)",
            subject=str(folder),
            hint="check the patterns: " + " ".join(selection.globs),
        )
    deeper = not selection.recursive and subfolders
    return InputNotFoundError(
        "folder holds no audio files" + (" at its top" if deeper else ""),
        subject=str(folder),
        hint="pass audio files, a folder with .wav/.mp3/.flac/... in it"
        + (", or add --recursive" if deeper else ""),
    )


def _match(path: str, name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(name, pattern)


@dataclass(frozen=True)
class Input:
    """One file to transcribe, or a bad entry kept (with its error) to be reported in order."""

    path: Path
    error: KvscribeError | None = None
    root: Path | None = None  # the folder it was found in (as given); None: given directly


def read_files_from(source: str) -> list[Path]:
    """Paths, one per line, from a file or `-` (stdin); blank lines are skipped."""
    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            text = Path(source).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise InputNotFoundError(
            f"cannot read the list: {exc.strerror}", subject=source, hint="check the path"
        ) from None
    return [Path(line) for line in text.splitlines() if line.strip()]


def expand(paths: Iterable[Path], selection: Selection = Selection()) -> list[Input]:
    """Files as given; folders as the audio files in them (sorted), searched per `selection`."""
    found: list[Input] = []
    seen: set[str] = set()
    for path in paths:
        entries = _folder(path, selection) if path.is_dir() else [_file(path)]
        for entry in entries:
            key = os.path.abspath(entry.path)
            if key not in seen:  # the same file named twice is transcribed once
                seen.add(key)
                found.append(entry)
    return found


def _file(path: Path, root: Path | None = None) -> Input:
    try:
        check_readable(path)
    except KvscribeError as exc:
        return Input(path, exc, root)
    return Input(path, None, root)


def _folder(folder: Path, selection: Selection) -> list[Input]:
    files, filtered, subfolders = [], 0, False
    walker = (
        os.walk(folder) if selection.recursive else [next(os.walk(folder), (str(folder), [], []))]
    )
    for root, dirs, names in walker:
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # skip hidden folders
        subfolders = subfolders or bool(dirs)
        for name in names:
            path = Path(root) / name
            relative = PurePosixPath(path.relative_to(folder).as_posix())
            if name.startswith(".") or not looks_like_media(path):
                continue
            if selection.wants(relative):
                files.append(path)
            else:
                filtered += 1
    if not files:
        return [Input(folder, _no_audio_in(folder, selection, filtered, subfolders))]
    return [_file(p, folder) for p in sorted(files)]


def looks_like_media(path: Path) -> bool:
    """Audio/video by extension, or else by the container's leading bytes."""
    if path.suffix.lower() in AUDIO_EXTENSIONS:
        return True
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return False
    return any(head[offset : offset + len(magic)] == magic for offset, magic in _MAGIC)


def output_bases(inputs: list[Input]) -> dict[Path, PurePosixPath]:
    """Each input -> its output path without extension, relative to the output folder.

    Relative to the deepest folder holding every input's root (a folder given as
    input, or a given file's folder), so a folder's tree is mirrored under the
    output folder; two inputs that would share a base (a.wav and a.mp3) keep their
    extension in it, until no two share one (x.mp3 kept whole is x.mp3.wav's stem).
    """
    if not inputs:
        return {}
    absolute = {entry.path: Path(os.path.abspath(entry.path)) for entry in inputs}
    roots = [os.path.abspath(e.root) if e.root else str(absolute[e.path].parent) for e in inputs]
    common = Path(os.path.commonpath(roots))
    bases = {
        p: PurePosixPath(a.relative_to(common).with_suffix("").as_posix())
        for p, a in absolute.items()
    }
    for path, base in bases.items():
        if not base.name.strip("."):  # "..wav" has no stem to name outputs by: keep it whole
            bases[path] = PurePosixPath(absolute[path].relative_to(common).as_posix())
    # Whole names never clash (two inputs are two paths), so each round keeps more stems
    # whole until none is shared.
    changed = True
    while changed:
        changed = False
        for path in _shared(bases):
            whole = PurePosixPath(absolute[path].relative_to(common).as_posix())
            changed |= bases[path] != whole
            bases[path] = whole
    _check_inside(bases)
    return bases


def _shared(bases: dict[Path, PurePosixPath]) -> list[Path]:
    """The inputs whose base another input's is too."""
    counts = Counter(bases.values())
    return [path for path, base in bases.items() if counts[base] > 1]


def _check_inside(bases: dict[Path, PurePosixPath]) -> None:
    for path, base in bases.items():
        if base.is_absolute() or ".." in base.parts or not base.name.strip("."):
            raise UsageError(
                "cannot map this input to a file inside the output folder",
                subject=str(path),
                hint="rename it",
            )
