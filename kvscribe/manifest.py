"""The output folder's memory of what was done: `.kvscribe/manifest.jsonl` in it.

One JSON record per finished input, appended and fsynced after its outputs are
renamed into place, so a crash at any moment leaves either a complete record
or none (a torn last line is ignored). The last record for an input wins. A
record holds the input's fingerprint (size, mtime, inode, ctime, sha256), the key of the
options that shape its outputs, and what became of it. Only one kvscribe run
writes to an output folder at a time (a lock on `.kvscribe/lock`, on every OS).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from kvscribe.atomic_file import atomic_write_text
from kvscribe.digest import sha256_file
from kvscribe.errors import ExitCode, OutputError, UsageError

STATE_DIR = ".kvscribe"  # the one hidden entry kvscribe adds to an output folder
NAME = "manifest.jsonl"
VERSION = 1
# Failures that rerunning cannot change while the input stays the same.
PERMANENT = {ExitCode.INPUT_NOT_FOUND, ExitCode.AUDIO_UNDECODABLE}


@dataclass(frozen=True)
class Fingerprint:
    size: int
    mtime_ns: int
    mode: int
    sha256: str | None  # None when the file cannot be read
    # Another file moved or copied in with the same size and mtime (`mv`, `cp -p`, `rsync
    # -t`) has another inode, or a newer ctime. 0: a record written before they were kept.
    inode: int = 0
    ctime_ns: int = 0

    def stat_key(self) -> tuple[int, ...]:
        return (self.size, self.mtime_ns, self.mode, self.inode, self.ctime_ns)

    def same_stat(self, other: Fingerprint | None) -> bool:
        return other is not None and self.stat_key() == other.stat_key()


def fingerprint(path: Path, known: Fingerprint | None = None) -> Fingerprint | None:
    """The file's fingerprint; its bytes are hashed only when its stat moved."""
    try:
        stat = path.stat()
    except OSError:
        return None
    quick = Fingerprint(
        stat.st_size, stat.st_mtime_ns, stat.st_mode, None, stat.st_ino, stat.st_ctime_ns
    )
    if quick.same_stat(known):
        return known
    try:
        digest = sha256_file(path)
    except OSError:
        return quick
    return dataclasses.replace(quick, sha256=digest)


@dataclass
class Record:
    input: str  # absolute path
    fingerprint: Fingerprint | None
    options: str  # options_key()
    status: str  # "done", "failed", or "writing" (its outputs: a run died while writing them)
    outputs: list[str] = field(default_factory=list)  # relative to the output folder
    error: str | None = None
    exit_code: int = 0
    audio_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def permanent_failure(self) -> bool:
        return self.status == "failed" and self.exit_code in PERMANENT

    def to_json(self) -> str:
        # Escaped: a file name that is not UTF-8 (lone surrogates) reads back as it was.
        return json.dumps({"v": VERSION, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Record | None:
        try:
            data = json.loads(line)
            if data.pop("v", None) != VERSION:
                return None
            print_ = data.pop("fingerprint")
            return cls(fingerprint=Fingerprint(**print_) if print_ else None, **data)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None  # a torn or foreign line


def options_key(settings: dict) -> str:
    """A short stable key for the options that change what an output contains."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Manifest:
    """Read at start, appended to as inputs finish, compacted at the end."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.state = folder / STATE_DIR
        self.path = self.state / NAME
        self.records: dict[str, Record] = {}
        self._handle = None
        self._lock: FileLock | None = None

    def __enter__(self) -> Manifest:
        try:
            self.state.mkdir(parents=True, exist_ok=True)
            self._lock = _take_lock(self.state / "lock", self.folder)
            self.records = _read(self.path)
            self._handle = open(self.path, "a", encoding="utf-8")
            if _ends_torn(self.path):  # a crash mid-line: the next record starts a line
                self._handle.write("\n")
        except OSError as exc:  # a folder no one may write in, checked only by trying
            self.__exit__()
            raise OutputError(
                f"cannot write here: {exc.strerror}",
                subject=str(self.folder),
                hint="choose another --output-dir or fix its permissions",
            ) from None
        return self

    def __exit__(self, *exc_info) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):  # add() has said why: a full disk
                self._handle.close()
        if self._lock is not None:
            self._lock.release()

    def get(self, path: Path) -> Record | None:
        return self.records.get(os.path.abspath(path))

    def add(self, record: Record) -> None:
        """Append and fsync: once this returns, the record survives a crash."""
        assert self._handle is not None, "use the manifest as a context manager"
        try:
            self._handle.write(record.to_json() + "\n")
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:  # a full disk: nothing more can be recorded, so the run stops
            raise OutputError(
                f"write failed: {exc.strerror}",
                subject=str(self.path),
                hint="free some disk space, then rerun to resume",
            ) from None
        self.records[record.input] = record

    def compact(self) -> None:
        """Rewrite with one line per input (atomically), so the file does not grow forever."""
        assert self._handle is not None
        text = "".join(record.to_json() + "\n" for record in self.records.values())
        try:
            atomic_write_text(self.path, text)
        except OutputError:  # a full disk: the appended file stays as it is, whole
            return
        with contextlib.suppress(OSError):  # it flushes again what add() failed to write
            self._handle.close()
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)


def _read(path: Path) -> dict[str, Record]:
    records: dict[str, Record] = {}
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as handle:
        for line in handle:
            record = Record.from_json(line)
            if record is not None:
                records[record.input] = record
    return records


def _ends_torn(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a record cut off by a crash)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def _take_lock(path: Path, folder: Path) -> FileLock:
    """Hold the folder's lock for the whole run, or fail at once: a second run must not wait
    behind the first (it could take hours) nor write into the same folder beside it."""
    lock = FileLock(path, timeout=0)  # flock on POSIX, LockFileEx on Windows
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(
            "another kvscribe run is writing to this folder",
            subject=str(folder),
            hint="wait for it to finish, or choose another --output-dir",
        ) from None
    return lock
