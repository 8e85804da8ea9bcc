"""The pieces of the GPU check that its CPU dry run does not reach (tests/test_gpu_check.py):
the realform recordings read at 16 kHz without PyAV, and whisper-cli let onto a GPU."""

from __future__ import annotations

import sys

import numpy as np

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))


def test_an_8_khz_recording_is_read_at_16_khz_as_the_decoder_reads_it():
    """The first lent GPU stopped on the realform recordings (8 kHz telephone audio): the
    dry run reads only 16 kHz clips. The FFT resampling must give what kvscribe's own
    decoder gives, sample for sample within a small error."""
    import gpu_check

    from kvscribe.audio import load_audio

    read = gpu_check.read_wav(gpu_check.REALFORM)
    decoded = load_audio(gpu_check.REALFORM)
    assert len(read) == len(decoded)
    assert np.corrcoef(read, decoded)[0, 1] > 0.999
    assert np.sqrt(np.mean((read - decoded) ** 2)) < 0.01 * np.sqrt(np.mean(decoded**2)) + 1e-3


def test_whisper_cli_is_kept_off_a_gpu_unless_use_gpu_says_so():
    from kvscribe.backends.whispercpp.flags import fallback_flags
    from kvscribe.backends.whispercpp.kvtypes import CacheTypes
    from kvscribe.backends.whispercpp.plan import Plan, Run, argv
    from kvscribe.contract import DecodeRequest
    from kvscribe.decoding import Fallback

    plan = Plan(5, -1, True, CacheTypes(), fallback_flags(Fallback()))
    run = Run(wav=ROOT / "samples" / "jfk.wav", out=ROOT / "out", threads=2)
    assert "-ng" in argv(["whisper-cli"], plan, run, DecodeRequest(), kv_types=False)
    plan.use_gpu = True
    assert "-ng" not in argv(["whisper-cli"], plan, run, DecodeRequest(), kv_types=False)
