"""A Ctrl-C or SIGTERM that a native library swallows is raised again (kvscribe/interrupts.py).

PyAV's resampler lost 20 in 835 of the exceptions a signal handler raised inside it
(benchmarks/results/swallowed_interrupts.md): a run sent SIGTERM while it scanned its input
went on transcribing. That happens by chance only, so here the resampler's step swallows the
handler's exception on purpose, as PyAV does; the signal, the handler and the decode are real.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kvscribe import interrupts
from kvscribe.audio import load_audio
from kvscribe.cli.termination import sigterm_stops_like_ctrl_c
from kvscribe.errors import ExitCode, Terminated
from tests.conftest import ROOT, SAMPLE

TELEPHONE = ROOT / "eval" / "realform" / "asterisk_en_ivr_dev.wav"  # 8 kHz: resampled


class _Swallowing:
    """av.AudioResampler whose first `resample` call receives `sent` and loses the
    handler's exception, returning its frames as if nothing had happened."""

    def __init__(self, real_class, sent: signal.Signals, **settings):
        self.real, self.sent, self.lost = real_class(**settings), sent, []

    def resample(self, frame):
        frames = self.real.resample(frame)
        if self.sent is not None:
            sent, self.sent = self.sent, None
            try:
                os.kill(os.getpid(), sent)
                time.sleep(1)  # the handler runs here, at the latest
            except KeyboardInterrupt as stop:
                self.lost.append(stop)
        return frames


@pytest.fixture
def swallowing(monkeypatch):
    """Make the next decode's resampler lose the given signal's interrupt; the resamplers
    made, to check the loss happened."""
    import av

    made: list[_Swallowing] = []
    real = av.AudioResampler

    def arm(sent: signal.Signals) -> list[_Swallowing]:
        def make(**settings):
            made.append(_Swallowing(real, sent if not made else None, **settings))
            return made[-1]

        monkeypatch.setattr(av, "AudioResampler", make)
        return made

    return arm


@pytest.mark.parametrize(
    ("sent", "raised", "code"),
    [
        (signal.SIGTERM, Terminated, ExitCode.TERMINATED),
        (signal.SIGINT, KeyboardInterrupt, ExitCode.INTERRUPTED),
    ],
)
def test_an_interrupt_the_resampler_swallowed_still_stops_the_decode(
    swallowing, capsys, sent, raised, code
):
    made = swallowing(sent)
    with pytest.raises(SystemExit) as exited, sigterm_stops_like_ctrl_c():
        load_audio(TELEPHONE)
    assert exited.value.code == code  # the command's exit for that interrupt
    assert made and len(made[0].lost) == 1  # the resampler did lose it
    assert isinstance(made[0].lost[0], raised)
    assert capsys.readouterr().err.startswith("kvscribe: ")


def test_without_an_interrupt_the_decode_is_whole():
    with sigterm_stops_like_ctrl_c():
        first = load_audio(SAMPLE)
    assert first.size == 176000  # 11 s at 16 kHz


def test_ctrl_c_is_counted_only_while_a_command_runs_and_an_ignored_one_stays_ignored():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with sigterm_stops_like_ctrl_c():
        assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's
    try:
        with sigterm_stops_like_ctrl_c():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_interrupt_that_came_out_of_a_step_is_not_raised_twice():
    """The check runs only after a step that returned: an interrupt that went up from the
    step is the caller's, and the steps after it (or a new iteration) do not see it again."""

    def steps():
        yield 1
        raise interrupts.raising(KeyboardInterrupt())

    items = interrupts.unswallowed(steps())
    assert next(items) == 1
    with pytest.raises(KeyboardInterrupt):
        next(items)
    assert list(interrupts.unswallowed(iter([2, 3]))) == [2, 3]


def _stopped_then_a_cleanup_failed(stop: type[KeyboardInterrupt]):
    """A decode stopped by `stop` whose `finally` then fails, as closing a file a worker
    thread still read did ("generator already executing", CI stop 90): the cleanup's error
    replaces the stop, which is only in its context. A fault no real run can be made to
    hit on demand."""
    try:
        raise stop()
    finally:
        raise ValueError("generator already executing")


@pytest.mark.parametrize(
    ("stop", "code", "line"),
    [
        (Terminated, ExitCode.TERMINATED, "kvscribe: stopped by SIGTERM\n"),
        (KeyboardInterrupt, ExitCode.INTERRUPTED, "kvscribe: interrupted\n"),
    ],
)
def test_an_error_raised_while_a_stop_went_up_still_stops_the_command(capsys, stop, code, line):
    """It ended the command as an internal error (exit 1) where 143 or 130 was due."""
    with pytest.raises(SystemExit) as exited, sigterm_stops_like_ctrl_c():
        _stopped_then_a_cleanup_failed(stop)
    assert exited.value.code == code
    assert capsys.readouterr().err == line
    with pytest.raises(ValueError), sigterm_stops_like_ctrl_c():  # no stop behind: a bug
        raise ValueError("an engine bug")


def test_a_batch_s_file_whose_decode_was_stopped_stops_the_batch():
    """A batch turns a file's unexpected error into that file's failure and goes on with the
    next; an error raised while a stop went up is the stop. Taken for a failed file, a
    Ctrl-C into `-o` decoded the rest of an 18-minute recording: the run ended over 30 s
    after it (tests/test_termination.py's rare hangs of its `-o` cases)."""
    from pathlib import Path, PurePosixPath

    from kvscribe.batch.worker import Task, work_guarded

    class Stopped:
        def work(self, task, *args):
            _stopped_then_a_cleanup_failed(KeyboardInterrupt)

    class Broken:
        def work(self, task, *args):
            raise ValueError("an engine bug")

    task = Task(Path("a.wav"), PurePosixPath("a"), None)
    with pytest.raises(KeyboardInterrupt):
        work_guarded(Stopped(), task)
    failed = work_guarded(Broken(), task)
    assert "internal error: ValueError: an engine bug" in failed.error.one_line()
