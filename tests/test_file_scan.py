"""A whole file's speech probabilities with silero cut in two (kvscribe/voice/file_scan.py):
the same values, to the bit, as the model run whole on the same pieces, on real speech; its
convolutions on several threads at once, with a bounded number of blocks held; two scans at
once each get their own file's values."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.stream import blocks, open_streamed
from kvscribe.voice.file_scan import FileScanner
from kvscribe.voice.silero import SILENCE_RESET_WINDOWS, WINDOW, SileroVad
from tests.conftest import EVAL_DIR, LONG_FORM, SAMPLE

TELEPHONE = EVAL_DIR.parent / "realform" / "asterisk_en_ivr_dev.wav"


def _pieces(samples, size: int) -> list[np.ndarray]:
    return [samples[start : start + size] for start in range(0, samples.size, size)]


def _whole_model(pieces) -> np.ndarray:
    vad = SileroVad(threads=1)
    return np.concatenate([vad.probabilities(piece) for piece in pieces])


@pytest.mark.parametrize("size", [30 * SAMPLE_RATE, 7_777], ids=["30 s", "odd pieces"])
def test_the_same_probabilities_as_the_whole_model(size):
    audio = open_streamed(TELEPHONE)
    pieces = _pieces(audio[0 : 120 * SAMPLE_RATE], size)
    expected = _whole_model(pieces)
    found = FileScanner(2).probabilities(pieces)
    audio.close()
    assert found.size == 120 * SAMPLE_RATE // 512
    assert np.array_equal(found, expected)


class _Watched(FileScanner):
    """Records when each block's convolutions ran and how many blocks were held."""

    def __init__(self, workers: int):
        super().__init__(workers)
        self.spans: list[tuple[float, float]] = []
        self.held = self.most_held = 0
        self._lock = threading.Lock()

    def _convolved(self, batch):
        with self._lock:
            self.held += 1
            self.most_held = max(self.most_held, self.held)
        started = time.perf_counter()
        out = super()._convolved(batch)
        self.spans.append((started, time.perf_counter()))
        return out

    def _decoded(self, *arguments):
        with self._lock:
            self.held -= 1
        return super()._decoded(*arguments)


def test_blocks_are_convolved_side_by_side_and_few_are_held():
    audio = open_streamed(TELEPHONE)
    scanner = _Watched(2)
    found = scanner.probabilities(blocks(audio))
    audio.close()
    assert found.size == audio.size // 512
    spans = sorted(scanner.spans)
    overlapping = sum(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))
    assert overlapping >= len(spans) // 3, spans
    assert scanner.most_held <= 2 * 2 + 1


def test_two_scans_at_once_each_get_their_own_files_values():
    files = [open_streamed(TELEPHONE), open_streamed(LONG_FORM)]
    pieces = [_pieces(audio[0 : 90 * SAMPLE_RATE], 30 * SAMPLE_RATE) for audio in files]
    expected = [_whole_model(own) for own in pieces]
    scanner, found = FileScanner(2), [None, None]

    def scan(number: int) -> None:
        found[number] = scanner.probabilities(pieces[number])

    threads = [threading.Thread(target=scan, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for audio in files:
        audio.close()
    assert all(np.array_equal(f, e) for f, e in zip(found, expected, strict=True))


def test_a_long_run_of_digital_silence_puts_the_detector_back_at_a_files_start():
    """Over a long run of zeros silero's state drifts (after 40 s of them JFK's first 3.5 s
    read 0.277 on average against 0.494 at a file's start, and the decode lost "ask not":
    benchmarks/results/silence_drift.md). Past
    SILENCE_RESET_WINDOWS the run reads 0 and the state is the initial one, so what follows
    reads the same however long the run, scanned or streamed in odd pieces."""
    speech = load_audio(SAMPLE)
    found = {}
    for windows in (SILENCE_RESET_WINDOWS + 1, 1250):  # just past the reset, and 40 s
        audio = np.concatenate([np.zeros(windows * WINDOW, dtype=np.float32), speech])
        scanned = FileScanner(2).probabilities(_pieces(audio, 30 * SAMPLE_RATE))
        assert np.array_equal(scanned, _whole_model(_pieces(audio, 7_777)))
        assert not scanned[SILENCE_RESET_WINDOWS - 1 : windows].any()
        found[windows] = scanned[windows:]
    shortest, longest = found.values()
    assert np.array_equal(shortest, longest)
    # As at the file's start (its first window, all zeros, runs into the run here).
    alone = FileScanner(2).probabilities([speech])
    assert np.abs(longest - alone).max() < 0.05


_MAKE_SCANNER = (
    "import sys\n"
    "from kvscribe.voice.file_scan import FileScanner\n"
    "FileScanner(1)\n"
    "print('onnx' in sys.modules)\n"
)


def _scanner_in_a_process(cache) -> str:
    environment = {**os.environ, "KVSCRIBE_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _MAKE_SCANNER], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_model_is_cut_once_into_the_cache_and_read_back_without_onnx(tmp_path):
    assert _scanner_in_a_process(tmp_path) == "True"  # cut: the onnx package was needed
    parts = sorted(path.name for path in (tmp_path / "models").glob("silero*.onnx"))
    assert len(parts) == 2 and "convolutions" in parts[0] and "lstm" in parts[1]
    assert _scanner_in_a_process(tmp_path) == "False"  # read back from the cache


def test_a_cache_that_cannot_take_the_parts_cuts_them_in_memory(tmp_path):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder would be")
    assert _scanner_in_a_process(not_a_folder) == "True"
    assert not_a_folder.read_text() == "a file where the cache folder would be"


def test_a_model_without_the_cut_point_is_scanned_whole(monkeypatch, tmp_path):
    """Another faster-whisper's silero file may name its tensors otherwise: the scan then
    runs the model whole, with the same values."""
    from kvscribe.voice import file_scan

    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path))  # no parts cut already
    monkeypatch.setattr(file_scan, "_CUT", "/no/such/tensor")
    monkeypatch.setattr(file_scan, "_halves", file_scan._halves.__wrapped__)  # not memoized
    file_scan.scanner.cache_clear()
    try:
        scanner = file_scan.scanner()
        audio = open_streamed(TELEPHONE)
        pieces = _pieces(audio[0 : 60 * SAMPLE_RATE], 30 * SAMPLE_RATE)
        found = scanner.probabilities(pieces)
        audio.close()
    finally:
        file_scan.scanner.cache_clear()
    assert isinstance(scanner, file_scan.WholeModelScanner)
    assert np.array_equal(found, _whole_model(pieces))
