"""Speech no read of it gets past is reported, never lost unsaid: what the last round of
rereads leaves (kvscribe/rereads.py) is counted in the engine's report, and the stats, the
file's line and --json say so. The real model and audio, with a fault no read gets past."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import pytest

from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest
from tests import loaded
from tests.conftest import EVAL_DIR, SAMPLE

pytestmark = [pytest.mark.model, pytest.mark.eval]

JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"
LIBRIVOX = EVAL_DIR / "ps_librivox_ss01_0870.wav"


def _backend(name: str):
    return loaded.backend(name, "cpu-laptop")


def _decode(backend, audio, **request):
    run = backend.transcribe(audio, DecodeRequest(**request))
    return list(run.segments), run.report


@pytest.mark.slow
def test_speech_every_read_skips_is_reported_not_lost_silently(monkeypatch):
    """The real model and audio, with a fault no read gets past: of the words of the joined
    real clips' JFK sentence (40-50.4 s), every decode keeps only the first three it reads
    there, so each round leaves the rest uncovered. After the last round what is still skipped is
    counted in the report (seconds of speech and stretches), not dropped unsaid."""
    from kvscribe.backends.ctranslate2 import word_times
    from kvscribe.cli.render import unread_rows
    from kvscribe.rereads import MAX_TAIL_ROUNDS

    with_words, reads = word_times.with_words, []

    def skipping(result, alignment, chunk):
        aligned = with_words(result, alignment, chunk)
        inside = [w for w in aligned.words if 40.0 <= w.start < 50.4]
        if not inside:
            return aligned
        reads.append(chunk)
        kept = [w for w in aligned.words if w not in inside[3:]]
        tokens = [t for w in kept for t in w.tokens]
        return replace(aligned, tokens=tokens, words=tuple(kept))

    monkeypatch.setattr(word_times, "with_words", skipping)
    segments, report = _decode(_backend("ctranslate2"), load_audio(JOINED_REAL), batch_size=8)
    assert 2 <= len(reads) <= 1 + MAX_TAIL_ROUNDS, reads  # read, and again, round by round
    assert report.unread_stretches == 1
    assert 2.0 <= report.unread_speech_seconds <= 10.4, report.unread_speech_seconds
    text = "".join(s.text for s in segments)
    assert "fellow Americans" not in text and "Ten of" in text  # the fault went in, alone
    seconds = f"{report.unread_speech_seconds:.1f} s"
    figures = {"speech_unread_seconds": report.unread_speech_seconds, "speech_unread_stretches": 1}
    assert unread_rows(figures) == [("speech not transcribed", f"{seconds} in 1 stretch(es)")]
    assert seconds in _finished_line(report, quiet=False) and "--batch-size 1" in _finished_line(
        report, quiet=False
    )
    assert _finished_line(report, quiet=True) == ""
    event = json.loads(_finished_line(report, quiet=True, json_events=True))
    unread = round(report.unread_speech_seconds, 2)
    assert event["event"] == "done" and event["speech_unread_seconds"] == unread > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ctranslate2", "transformers"])
def test_speech_every_read_skips_is_reported_on_the_input_it_is_from(monkeypatch, name):
    """Short files sharing batches, the same fault on the second input only (JFK: each read
    keeps its first three words), on both engines' drivers: its report counts the stretch
    no read got past, the first input's counts nothing."""
    from kvscribe.backends.ctranslate2 import word_times
    from kvscribe.stepped import batched as stepped_batched

    def first_three(aligned, chunk):
        if chunk.source != 1 or len(aligned.words) <= 3:
            return aligned
        kept = aligned.words[:3]
        return replace(aligned, tokens=[t for w in kept for t in w.tokens], words=kept)

    if name == "ctranslate2":
        aligned = word_times.with_words
        monkeypatch.setattr(
            word_times, "with_words", lambda r, a, chunk: first_three(aligned(r, a, chunk), chunk)
        )
    else:
        chunk_decode = stepped_batched._chunk_decode
        monkeypatch.setattr(
            stepped_batched,
            "_chunk_decode",
            lambda plan, chunk, *rest: first_three(chunk_decode(plan, chunk, *rest), chunk),
        )
    backend = _backend(name)
    audios = [load_audio(LIBRIVOX), load_audio(SAMPLE)]
    runs = backend.decode_together(audios, backend.completed(DecodeRequest(language="en")))
    texts = ["".join(s.text for s in run.segments) for run in runs]
    assert len(texts[0].split()) > 10 and len(texts[1].split()) <= 3 * 4, texts
    assert [run.report.unread_stretches for run in runs] == [0, 1]
    assert runs[1].report.unread_speech_seconds >= 2.0


def _finished_line(report, quiet: bool, json_events: bool = False) -> str:
    """What the file view prints when a file with `report` is done (with `json_events`,
    its event on stdout)."""
    import io
    from pathlib import Path, PurePosixPath

    from rich.console import Console

    from kvscribe.batch.worker import Result, Task
    from kvscribe.cli.batch_view import BatchView
    from kvscribe.stats import FileStats

    out = io.StringIO()
    view = BatchView(Console(file=out, width=300), json_events, quiet=quiet, inputs=1)
    task = Task(Path("joined_real.wav"), PurePosixPath("joined_real"), None)
    with contextlib.redirect_stdout(out if json_events else io.StringIO()):
        view.finished(Result(task, stats=FileStats("joined_real.wav", report=report)))
    return out.getvalue()
