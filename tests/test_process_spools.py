"""kvscribe/process_spools.py: a killed process's temporary folder is removed by the next
process of its kind, never a running one's or another kind's. Real processes; the end to
end case (a `kvscribe -` killed mid-spool) is in tests/test_termination.py."""

from __future__ import annotations

import os
import subprocess
import sys

from kvscribe.process_spools import prefix, remove_orphans, spool_folder


def _gone_pid() -> int:
    """The process id of a process that has ended (and been reaped)."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                           capture_output=True, text=True)  # fmt: skip
    return int(ended.stdout)


def test_the_next_spool_of_a_kind_removes_the_folders_of_its_ended_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    dead = _gone_pid()
    orphan = tmp_path / f"{prefix('shipped')}{dead}-abc"
    (orphan / "0").mkdir(parents=True)
    (orphan / "0" / "talk.wav").write_bytes(b"RIFF" * 1000)
    running = tmp_path / f"{prefix('shipped')}{os.getpid()}-held"
    other_kind = tmp_path / f"{prefix('stdin')}{dead}-xyz"
    not_ours = tmp_path / f"kvscribe-shipped-x{dead}-q"
    for folder in (running, other_kind, not_ours):
        folder.mkdir()
    with spool_folder("shipped") as made:
        assert made.parent == tmp_path and made.name.startswith(f"kvscribe-shipped-{os.getpid()}-")
        assert not orphan.exists()
        assert running.is_dir() and other_kind.is_dir() and not_ours.is_dir()
    assert not made.exists()
    assert remove_orphans("stdin", tmp_path) == [other_kind]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, not_ours.name])
