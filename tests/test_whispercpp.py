"""The whisper.cpp backend against a real whisper-cli: the ggml writer, the run, the figures
whisper.cpp reports, and every quirk of the binary caused for real."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio.mel import mel_filters
from kvscribe.backends.whispercpp.process import WhisperProcess, check_outcome, write_wav_f32
from kvscribe.backends.whispercpp.report import parse_segment_line
from kvscribe.errors import (
    AudioDecodeError,
    BackendUnavailableError,
    EngineError,
    InputNotFoundError,
    ModelNotFoundError,
    UsageError,
)
from kvscribe.machine.capacity import usable_cores
from kvscribe.models import resolve
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import (
    CARDS,
    FOX,
    FOX_TEXT,
    KVSCRIBE,
    SAMPLE,
    SAMPLE_TEXT,
    run_cli,
    wer,
)
from tests.processes import whisper_cli_under

pytestmark = [pytest.mark.whispercpp]

JFK = SAMPLE  # shipped in samples/
# CARDS and FOX (tests/conftest.py) where the weights, the audio or the flags are the claim,
# not the 11 s of JFK: whisper-cli encodes a whole 30 s window either way.
FOX_SECONDS = 2.89  # FOX's length, rounded up
# whisper-cli run directly takes this worker's share of the cores, as kvscribe gives it.
_THREADS = ("-t", str(usable_cores()))
# Greedy where the weights or the audio are the claim, not the search (whisper-cli's default
# beam of 5 cost a quarter of a tiny.en run).
_GREEDY = ("-bs", "1")


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory) -> Path:
    """Three minutes of speech (the sample 16 times), made here."""
    from kvscribe.audio import load_audio
    from tests import media

    path = tmp_path_factory.mktemp("long") / "long.wav"
    return media.encode(np.tile(load_audio(SAMPLE), 16), 16000, path, "pcm_s16le")


def _read_header(path: Path):
    with open(path, "rb") as handle:
        magic = handle.read(4)
        hparams = struct.unpack("<11i", handle.read(44))
        n_mel, n_freq = struct.unpack("<2i", handle.read(8))
        filters = np.frombuffer(handle.read(4 * n_mel * n_freq), "<f4").reshape(n_mel, n_freq)
        (count,) = struct.unpack("<i", handle.read(4))
        vocab = []
        for _ in range(count):
            (length,) = struct.unpack("<I", handle.read(4))
            vocab.append(handle.read(length))
        tensors = {}
        while header := handle.read(12):
            n_dims, name_len, kind = struct.unpack("<3i", header)
            dims = struct.unpack(f"<{n_dims}i", handle.read(4 * n_dims))
            name = handle.read(name_len).decode()
            size = int(np.prod(dims)) * (4 if kind == 0 else 2)
            data = np.frombuffer(handle.read(size), "<f4" if kind == 0 else "<f2")
            tensors[name] = (dims, kind, data)
    return magic, hparams, filters, vocab, tensors


def _names_whisper_cpp_loads(encoder_layers: int, decoder_layers: int) -> set[str]:
    """Every tensor name whisper.cpp 1.8's loader asks for (src/whisper-arch.h)."""
    attention = ["query.weight", "query.bias", "key.weight", "value.weight", "value.bias"]
    attention += ["out.weight", "out.bias"]
    block = [f"attn.{n}" for n in attention] + ["attn_ln.weight", "attn_ln.bias"]
    block += ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"]
    block += ["mlp_ln.weight", "mlp_ln.bias"]
    cross = [f"cross_attn.{n}" for n in attention] + ["cross_attn_ln.weight", "cross_attn_ln.bias"]
    names = {"encoder.positional_embedding", "encoder.ln_post.weight", "encoder.ln_post.bias"}
    names |= {f"encoder.conv{i}.{p}" for i in (1, 2) for p in ("weight", "bias")}
    names |= {"decoder.positional_embedding", "decoder.token_embedding.weight"}
    names |= {"decoder.ln.weight", "decoder.ln.bias"}
    names |= {f"encoder.blocks.{i}.{n}" for i in range(encoder_layers) for n in block}
    names |= {f"decoder.blocks.{i}.{n}" for i in range(decoder_layers) for n in block + cross}
    return names


def test_ggml_file_has_whisper_cpp_layout(tiny_ggml):
    from kvscribe.models.ct2_file import whisper_dims
    from kvscribe.models.ct2_to_hf import iter_hf_tensors

    source = resolve("tiny.en", ("ctranslate2",)).path
    dims = whisper_dims(source / "model.bin")
    magic, hparams, filters, vocab, tensors = _read_header(tiny_ggml)
    assert magic == b"lmgg"
    assert hparams == (51864, 1500, 384, 6, 4, 448, 384, 6, 4, 80, 1)
    np.testing.assert_array_equal(filters, mel_filters(80))
    assert len(vocab) == 50256 and vocab[290] == b" and" and vocab[0] == b"!"
    assert vocab[50255] != b""  # the last ordinary token is present
    assert set(tensors) == _names_whisper_cpp_loads(dims.n_audio_layer, dims.n_text_layer)
    assert tensors["encoder.conv1.bias"][:2] == ((1, 384), 0)
    assert tensors["encoder.conv1.weight"][:2] == ((3, 80, 384), 1)
    assert tensors["encoder.positional_embedding"][:2] == ((384, 1500), 0)
    assert tensors["decoder.token_embedding.weight"][:2] == ((384, 51864), 1)
    assert "decoder.blocks.0.cross_attn.key.bias" not in tensors
    reference = dict(iter_hf_tensors(source, dims))
    key = reference["model.decoder.layers.3.encoder_attn.k_proj.weight"]
    np.testing.assert_array_equal(
        tensors["decoder.blocks.3.cross_attn.key.weight"][2], key.astype("<f2").ravel()
    )


@pytest.mark.parametrize("name", ["tiny.en", "base"])
@pytest.mark.slow
def test_written_ggml_transcribes_in_whisper_cli_directly(name, whisper_cli, tmp_path):
    if name == "base" and not EMBEDDED["base"].installed():
        pytest.skip("the base extra is not installed")
    model = resolve(name, ("ggml",))  # converted through kvscribe's store
    assert model.format == "ggml" and model.path.suffix == ".bin"
    out = tmp_path / "out"
    language = ["-l", "auto"] if name == "base" else []
    argv = [whisper_cli, "-m", model.path, "-f", FOX, "-oj", "-of", out, *_THREADS, *_GREEDY]
    done = subprocess.run(
        [*argv, *language],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.with_suffix(".json").read_text())
    text = "".join(item["text"] for item in result["transcription"])
    assert wer(FOX_TEXT, text) <= 0.1
    assert result["result"]["language"] == "en"


def test_conversion_is_cached_by_content(tmp_path):
    first = resolve("tiny.en", ("ggml",))
    stamp = first.path.stat().st_mtime_ns
    again = resolve("tiny.en", ("ggml",))
    assert again.path == first.path and again.path.stat().st_mtime_ns == stamp
    assert first.path.name.startswith("tiny.en-ggml-v1-")


# The shipped sample only: eval/clips/whispercpp_jfk.wav has the same bytes, so a second run
# on it proved nothing more.
@pytest.mark.slow
def test_cli_transcribes_jfk_with_whisper_cpp_figures(whisper_cli, tmp_path):
    stats = tmp_path / "stats.json"
    result = run_cli(JFK, "--backend", "whispercpp", "-f", "txt", "--stats-json", stats)
    assert result.code == 0, result.stderr
    assert wer(SAMPLE_TEXT, result.stdout) <= 0.1
    report = json.loads(stats.read_text())
    memory = report["engine_memory_bytes"]
    for key in ("kv self", "kv cross", "kv pad", "compute buffer (encode)"):
        assert memory[key] > 0, key
    assert not report["kv_estimated"]  # beam 5: whisper.cpp re-allocates (5 + 2)-fold
    assert report["kv_self_peak_bytes"] == memory["kv self"] * 7
    assert report["kv_cross_bytes"] == memory["kv cross"]
    assert report["engine_timings_ms"]["encode"] > 0 and report["encoder_seconds"] > 0
    assert report["engine_runs"]["encode"] == 1 and report["tokens_decoded"] > 20
    assert report["engine_peak_rss_bytes"] > 77_000_000  # at least the f16 weights
    table = result.stderr  # the stats table, printed with or without --stats-json
    assert "engine buffers" in table and "kv cross" in table


@pytest.mark.slow
def test_every_writer_works_from_whisper_cpp_segments(whisper_cli, tmp_path):
    import srt

    args = ("--backend", "whispercpp", "--beam-size", "1", "-o", tmp_path, "-f", "all", "-q")
    result = run_cli(FOX, *args)  # greedy: the writers are the claim, not the search
    assert result.code == 0, result.stderr
    subtitles = list(srt.parse((tmp_path / f"{FOX.stem}.srt").read_text()))
    assert subtitles and subtitles[-1].end.total_seconds() <= FOX_SECONDS + 0.5
    data = json.loads((tmp_path / f"{FOX.stem}.json").read_text())
    assert data["language"] == "en" and wer(FOX_TEXT, data["text"]) <= 0.1


@pytest.mark.slow
def test_profile_flags_reach_whisper_cli(whisper_cli, tmp_path):
    stats = tmp_path / "stats.json"
    result = run_cli(CARDS, "-b", "whispercpp", "-p", "tiny-vram", "--stats-json", stats)
    assert result.code == 0, result.stderr
    settings = json.loads(stats.read_text())["settings"]
    assert settings["beam size"] == "1" and settings["text context (-mc)"] == "128"
    assert settings["flash attention"] == "on" and "kv self allocation" not in settings
    report = json.loads(stats.read_text())
    assert report["kv_self_peak_bytes"] == report["engine_memory_bytes"]["kv self"]  # greedy
    notes = json.loads(stats.read_text())["not_applicable"]
    assert any("whisper.cpp allocates the whole text context" in note for note in notes)
    assert settings["kv cache types"] == "self q8_0, cross q8_0"  # the policy's type is kept


# -- batch size: whisper-cli's -p (benchmarks/results/whispercpp_processors.md) --------------


# -- whisper-cli's quirks, caused for real ---------------------------------------------------


def _run(argv, tmp_path, timeout=None):
    proc = WhisperProcess([str(a) for a in argv], tmp_path / "stderr.txt", timeout)
    lines = list(proc.stdout_lines())
    return lines, proc.finish()


def test_unknown_flag_exits_zero_but_is_an_error(whisper_cli, tiny_ggml, tmp_path):
    _, outcome = _run([whisper_cli, "-m", tiny_ggml, "-f", JFK, "--no-such-flag"], tmp_path)
    assert outcome.returncode == 0  # the quirk
    with pytest.raises(BackendUnavailableError, match="does not accept kvscribe's flags"):
        check_outcome(outcome, str(whisper_cli), tiny_ggml, JFK)


def test_missing_model_is_a_model_error(whisper_cli, tmp_path):
    missing = tmp_path / "nope.bin"
    _, outcome = _run([whisper_cli, "-m", missing, "-f", JFK], tmp_path)
    assert outcome.returncode == 3
    with pytest.raises(ModelNotFoundError, match="could not load this model"):
        check_outcome(outcome, str(whisper_cli), missing, JFK)


def test_missing_audio_is_an_input_error(whisper_cli, tiny_ggml, tmp_path):
    _, outcome = _run([whisper_cli, "-m", tiny_ggml, "-f", tmp_path / "gone.wav"], tmp_path)
    assert outcome.returncode == 2
    with pytest.raises(InputNotFoundError):
        check_outcome(outcome, str(whisper_cli), tiny_ggml, tmp_path / "gone.wav")


def test_unreadable_audio_exits_zero_but_is_a_decode_error(whisper_cli, tiny_ggml, tmp_path):
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" + os.urandom(2000))
    _, outcome = _run([whisper_cli, "-m", tiny_ggml, "-f", corrupt], tmp_path)
    assert outcome.returncode == 0  # the quirk
    with pytest.raises(AudioDecodeError):
        check_outcome(outcome, str(whisper_cli), tiny_ggml, corrupt)


def test_unknown_language_exits_zero_but_is_a_usage_error(whisper_cli, tiny_ggml, tmp_path):
    _, outcome = _run([whisper_cli, "-m", tiny_ggml, "-f", JFK, "-l", "xx"], tmp_path)
    assert outcome.returncode == 0
    with pytest.raises(UsageError):
        check_outcome(outcome, str(whisper_cli), tiny_ggml, JFK)


def test_a_deadline_stops_the_child(whisper_cli, tiny_ggml, long_wav, tmp_path):
    started = time.perf_counter()
    _, outcome = _run([whisper_cli, "-m", tiny_ggml, "-f", long_wav, "-t", "1"], tmp_path, 1.0)
    assert time.perf_counter() - started < 10 and outcome.timed_out
    with pytest.raises(EngineError, match="did not finish"):
        check_outcome(outcome, str(whisper_cli), tiny_ggml, long_wav)


@pytest.mark.slow
def test_float_wav_reaches_whisper_cli_unchanged(whisper_cli, tiny_ggml, tmp_path):
    from kvscribe.audio import load_audio

    samples = load_audio(FOX)
    wav = tmp_path / "f32.wav"
    write_wav_f32(wav, samples)
    assert load_audio(wav).tobytes() == samples.tobytes()
    lines, outcome = _run([whisper_cli, "-m", tiny_ggml, "-f", wav, *_THREADS, *_GREEDY], tmp_path)
    text = "".join(parsed[2] for line in lines if (parsed := parse_segment_line(line)))
    assert outcome.returncode == 0 and wer(FOX_TEXT, text) <= 0.1
    assert outcome.peak_rss_bytes and outcome.peak_rss_bytes > 77_000_000


def test_printed_segment_times_parse_to_the_decimals_printed():
    """7.940 is 7.94, as whisper-cli's JSON gives it, not 7 + 0.94 (7.9399999999999995):
    the two readings of one run must compare equal."""
    line = "[01:02:07.940 --> 01:02:09.010]   text\n"  # two spaces, then the text
    assert parse_segment_line(line) == (3727.94, 3729.01, " text")
    assert parse_segment_line("[00:00:07.940 --> 00:00:08.300]  a") == (7.94, 8.3, "a")
    assert parse_segment_line("whisper_init: loading") is None


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the child through /proc")
def test_killed_child_is_a_one_line_error_and_writes_nothing(whisper_cli, long_wav, tmp_path):
    out = tmp_path / "out"
    cli = subprocess.Popen(
        [KVSCRIBE, long_wav, "-b", "whispercpp", "-o", out, "-f", "txt"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, whisper-cli included
    )
    try:
        deadline = time.monotonic() + 60
        while not (children := whisper_cli_under(cli.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "whisper-cli never started"
        time.sleep(1.0)
        os.kill(children[0], signal.SIGKILL)
        _, stderr = cli.communicate(timeout=60)
    finally:  # a failed test must not leave a transcription running under the next ones
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    assert cli.returncode == 1, stderr
    assert "killed by SIGKILL" in stderr and "Traceback" not in stderr
    assert f"{long_wav}: whisper-cli" in stderr  # names the user's file, not a temp file
    assert not (out / "long.txt").exists()


def test_timeout_setting_through_the_cli(whisper_cli, long_wav, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_WHISPER_TIMEOUT", "1")
    result = run_cli(long_wav, "-b", "whispercpp", "-o", tmp_path, "-f", "txt")
    assert result.code == 1 and "did not finish within" in result.stderr
    assert "KVSCRIBE_WHISPER_TIMEOUT" in result.stderr and "Traceback" not in result.stderr
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # manifest only


def test_broken_ggml_model_is_exit_5(whisper_cli, tmp_path):
    broken = tmp_path / "broken.bin"
    broken.write_bytes(b"lmgg" + struct.pack("<11i", 51864, 1500, 384, 6, 4, 448, 384, 6, 4, 80, 1))
    result = run_cli(SAMPLE, "-b", "whispercpp", "--model", broken)
    assert result.code == 5, result.stderr
    assert str(broken) in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "not a complete whisper.cpp model" in result.stderr


def test_truncated_ggml_model_is_exit_5(tiny_ggml, whisper_cli, tmp_path):
    cut = tmp_path / "cut.bin"
    cut.write_bytes(tiny_ggml.read_bytes()[:3_000_000])
    result = run_cli(SAMPLE, "-b", "whispercpp", "--model", cut)
    assert result.code == 5 and "ends inside a tensor" in result.stderr, result.stderr
