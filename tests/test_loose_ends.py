"""Small defects, each pinned for real: an old faster-whisper without the live VAD model, hub
names, an engine exception with one input, the output folder's lock, ru_maxrss units, NaN
audio, and cache policies that would silently do nothing."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from kvscribe.errors import ExitCode, UsageError
from tests.conftest import CARDS, FOX, ROOT, SAMPLE, run_cli, wer

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

FAST = ("--beam-size", "1", "-f", "txt,json")


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error" in line]


def _visible(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and ".kvscribe" not in p.parts]


# -- 1. faster-whisper without silero_vad_v6.onnx ---------------------------------------------


def test_the_faster_whisper_bound_is_the_first_release_with_the_vad_model():
    from kvscribe.voice import silero as vad

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f"faster-whisper>={vad.FIRST_RELEASE_WITH_MODEL}" in project["dependencies"]


def test_live_with_a_faster_whisper_lacking_the_vad_model_is_backend_unavailable(
    tmp_path, monkeypatch
):
    """A real faster-whisper package without the v6 asset (as 1.2.0 and older ship it), put
    in front of the installed one: `mic --live` exits 6 with one line saying what to do."""
    import faster_whisper

    from kvscribe.voice import silero as vad

    old = tmp_path / "old-faster-whisper"
    shutil.copytree(Path(faster_whisper.__file__).parent, old / "faster_whisper")
    (old / "faster_whisper" / "assets" / vad.MODEL_FILE).unlink()
    monkeypatch.setenv("PYTHONPATH", str(old))
    result = run_cli("mic", "--live", "--input", SAMPLE, "--as-fast-as-possible")
    assert result.code == ExitCode.BACKEND_UNAVAILABLE, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    [line] = _error_lines(result.stderr)
    assert vad.MODEL_FILE in line
    assert f"pip install -U 'faster-whisper>={vad.FIRST_RELEASE_WITH_MODEL}'" in line


# -- 2. hub names ---------------------------------------------------------------------------


def test_every_listed_model_name_means_the_repo_faster_whisper_uses():
    from faster_whisper.utils import _MODELS

    from kvscribe.models import hub
    from kvscribe.models.embedded import EMBEDDED

    unknown = run_cli("--model", "no-such-model", SAMPLE)
    assert unknown.code == ExitCode.MODEL_NOT_FOUND, unknown.stderr
    listed = unknown.stderr.replace("\n", "").split("one of: ", 1)[1].rstrip(")").split(", ")
    hub_names = [name for name in listed if name not in EMBEDDED]
    assert "distil-large-v3" in hub_names and "turbo" in hub_names
    for name in hub_names:
        assert hub.repo_for(name) == _MODELS[name], name
    assert set(_MODELS) <= set(listed)  # every name faster-whisper takes, kvscribe takes
    assert hub.repo_for("distil-small.en") == "Systran/faster-distil-whisper-small.en"


def test_a_distil_name_is_looked_up_under_its_real_repository():
    result = run_cli("--model", "distil-small.en", SAMPLE)  # offline: the error names the repo
    assert result.code == ExitCode.MODEL_NOT_FOUND, result.stderr
    assert "Systran/faster-distil-whisper-small.en" in result.stderr.replace("\n", "")


# -- 3. an engine exception with one input ----------------------------------------------------


def _main(monkeypatch, capsys, *args: str | Path) -> tuple[int, str, str]:
    """The real `kvscribe` command in this process (all of the entry point but its quick
    exit), so a fault can be injected."""
    from kvscribe.cli.app import run

    monkeypatch.setattr(sys, "argv", ["kvscribe", *map(str, args)])
    with pytest.raises(SystemExit) as exited:
        run()
    out, err = capsys.readouterr()
    return exited.value.code, out, err


def test_an_engine_exception_fails_the_one_input_like_a_worker_would(tmp_path, monkeypatch, capsys):
    from kvscribe import registry
    from kvscribe.manifest import NAME, STATE_DIR

    clip = Path(shutil.copy(CARDS, tmp_path / "talk.wav"))
    out = tmp_path / "out"
    first = run_cli(clip, "-o", out, *FAST)
    assert first.code == 0, first.stderr
    before = {p: p.read_bytes() for p in _visible(out)}
    assert len(before) == 2

    def engine_bug(self, audio, request):
        raise RuntimeError("cuBLAS exploded")  # no real input makes the engine raise this

    # A short file in an output folder decodes as a shared batch's file (transcribe_together).
    for method in ("transcribe", "transcribe_together"):
        monkeypatch.setattr(registry.get("ctranslate2"), method, engine_bug)
    code, stdout, stderr = _main(monkeypatch, capsys, clip, "-o", out, "--force", *FAST)
    assert code == ExitCode.SOME_FAILED, stderr
    [line] = _error_lines(stderr)
    assert str(clip) in line and "RuntimeError: cuBLAS exploded" in line
    assert "Traceback" not in stderr and stdout == ""
    assert {p: p.read_bytes() for p in _visible(out)} == before  # outputs untouched
    records = (out / STATE_DIR / NAME).read_text(encoding="utf-8").splitlines()
    record = json.loads(records[-1])
    assert record["status"] == "failed" and record["exit_code"] == ExitCode.SOME_FAILED
    assert "cuBLAS exploded" in record["error"]


# -- 4. the output folder's lock --------------------------------------------------------------


@pytest.mark.slow
def test_a_folder_locked_by_another_run_is_refused_at_once(tmp_path):
    out = tmp_path / "out"
    (out / ".kvscribe").mkdir(parents=True)
    with FileLock(out / ".kvscribe" / "lock"):  # how another kvscribe run holds it, on any OS
        refused = run_cli(CARDS, "-o", out, *FAST)
    assert refused.code == ExitCode.USAGE, refused.stderr
    [line] = _error_lines(refused.stderr)
    assert "another kvscribe run" in line and str(out) in refused.stderr.replace("\n", "")
    assert _visible(out) == []
    after = run_cli(CARDS, "-o", out, *FAST)  # released: the next run goes ahead
    assert after.code == 0, after.stderr


def test_the_lock_is_released_when_the_run_ends(tmp_path):
    from kvscribe.manifest import Manifest

    with (
        Manifest(tmp_path),
        pytest.raises(UsageError, match="another kvscribe run"),
        Manifest(tmp_path),
    ):
        pass
    with Manifest(tmp_path):  # the first one released its lock on leaving
        pass


# -- 5. ru_maxrss units -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "factor"), [("linux", 1024), ("darwin", 1), ("freebsd14", 1024)]
)
def test_maxrss_is_converted_to_bytes_per_platform(monkeypatch, platform, factor):
    from kvscribe.machine import memtrace

    monkeypatch.setattr(sys, "platform", platform)
    assert memtrace.maxrss_bytes(300_000) == 300_000 * factor


def test_whisper_cli_peak_rss_uses_the_shared_conversion():
    from kvscribe.backends.whispercpp import process
    from kvscribe.machine import memtrace

    assert process.maxrss_bytes is memtrace.maxrss_bytes


# -- 6. NaN / inf samples ---------------------------------------------------------------------


def _float_wav(path: Path, samples: np.ndarray, rate: int = 16_000) -> Path:
    """A mono 32-bit IEEE-float WAV (format tag 3), written byte by byte."""
    data = samples.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


@pytest.fixture
def non_finite_wav(tmp_path, request) -> Path:
    """Speech with a stretch of NaN (or inf) samples in it, as a corrupt float export has."""
    from kvscribe.audio import load_audio

    speech = load_audio(SAMPLE)
    speech[16_000:16_100] = request.param
    return _float_wav(tmp_path / "corrupt float.wav", speech)


@pytest.mark.slow
@pytest.mark.parametrize("non_finite_wav", [np.nan, np.inf, -np.inf], indirect=True)
def test_non_finite_samples_are_undecodable_audio(non_finite_wav, tmp_path):
    out = tmp_path / "out"
    for args in ([], ["-o", out]):
        result = run_cli(non_finite_wav, *args)
        assert result.code == ExitCode.AUDIO_UNDECODABLE, result.stderr
        assert result.stdout == "" and "Traceback" not in result.stderr
        [line] = _error_lines(result.stderr)
        assert str(non_finite_wav) in result.stderr.replace("\n", "")
        # Streamed decoding names where the bad samples start (sample 16,000 = 1.00 s).
        assert "non-finite samples (NaN/inf) from 1.00 s" in line and "re-export" in line
    assert _visible(out) == []


@pytest.mark.parametrize("non_finite_wav", [np.nan], indirect=True)
def test_non_finite_samples_stop_a_live_replay(non_finite_wav):
    result = run_cli("mic", "--live", "--input", non_finite_wav, "--as-fast-as-possible")
    assert result.code == ExitCode.AUDIO_UNDECODABLE, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    [line] = _error_lines(result.stderr)
    assert "non-finite samples (NaN/inf) from 1.00 s" in line
    assert str(non_finite_wav) in result.stderr.replace("\n", "")


# -- 7. cache policies that would do nothing (parse cases: tests/test_kvcache.py) -------------


def test_selectors_are_checked_against_the_real_model_not_the_syntax_check():
    from kvscribe.kvcache.spec import parse_policy, validate_policy

    validate_policy("full@layers=7")  # fine for some model: only the model can say
    with pytest.raises(UsageError):
        validate_policy("residual=2")  # wrong for every model: refused before any loading
    assert [s.describe() for s in parse_policy("q4_0,residual=2@layers=3", 4)][3] == (
        "kv q4_0(residual=2)"
    )
    with pytest.raises(UsageError, match="layers=odd"):
        parse_policy("half@layers=odd", 1)


@pytest.mark.slow
def test_a_selector_past_the_models_layers_exits_2_on_the_real_backend():
    result = run_cli(SAMPLE, "--backend", "transformers", "--kv-policy", "full@layers=7")
    assert result.code == ExitCode.USAGE, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    [line] = _error_lines(result.stderr)
    assert "'layers=7': selects no layer of this model" in line


@pytest.mark.model
def test_a_mistyped_command_names_the_one_meant_and_a_file_of_that_name_is_transcribed(
    tmp_path,
):
    """`kvscribe backend` said "backend: no such file (check the path)"; a word close to a
    command, with no file of that name, is a usage error naming the command. A file of
    that name is still an input, and a word close to no command still a missing file."""
    for typed, meant in (("backend", "backends"), ("setpu", "setup"), ("Models", "models")):
        result = run_cli(typed, cwd=tmp_path)
        assert result.code == ExitCode.USAGE, result.stderr
        assert f"did you mean `kvscribe {meant}`?" in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1
    assert run_cli("zebra", cwd=tmp_path).code == ExitCode.INPUT_NOT_FOUND
    shutil.copy(FOX, tmp_path / "backend")  # greedy: that it is transcribed is the claim
    transcribed = run_cli("backend", "-q", "-f", "txt", "--beam-size", "1", cwd=tmp_path)
    text = FOX.with_suffix(".txt").read_text(encoding="utf-8")
    assert transcribed.code == 0 and wer(text, transcribed.stdout) < 0.1, transcribed.stderr
