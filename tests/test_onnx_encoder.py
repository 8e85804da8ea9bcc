"""The encoder graph written from a CTranslate2 model's weights, run on onnxruntime in place
of CTranslate2's own encoder (kvscribe/models/onnx_encoder.py,
backends/ctranslate2/encoder.py): the same function, the same int8 error, a choice timed
once per machine and kept (timed again, an hour on and on a quiet machine, where other work
shared the cores with the timing), and the transcript either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, run_folder, wer

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def embedded():
    from kvscribe import models

    return models.resolve(None, ("ctranslate2",))


@pytest.fixture(scope="module")
def jfk_features(embedded):
    """JFK's log-mel, padded to one 30 s window, [1, n_mels, 3000]."""
    from faster_whisper import WhisperModel

    from kvscribe.adapters import faster_whisper as adapter
    from kvscribe.audio import load_audio

    # Only its feature extractor is read: float32 loads without quantizing the weights.
    engine = WhisperModel(str(embedded.path), device="cpu", compute_type="float32", cpu_threads=1)
    return adapter.window_features(engine, load_audio(SAMPLE))[None]


@pytest.fixture(scope="module")
def graphs(embedded, tmp_path_factory) -> dict:
    """The encoder graph at each precision, as the backend writes it into the run's cache
    (onnx_encoder.write, once a run: the int8 one is what every ctranslate2 backend of
    tiny.en on onnxruntime encodes with)."""
    from kvscribe.backends.ctranslate2.encoder import cached_graph

    with pytest.MonkeyPatch.context() as env:  # a module's fixture starts before _isolated_dirs
        env.setenv("KVSCRIBE_CACHE_DIR", str(run_folder(tmp_path_factory) / "cache"))
        return {p: cached_graph(embedded.path, embedded.name, p) for p in ("int8", "float32")}


@pytest.fixture(scope="module")
def ct2_encoded(embedded, jfk_features):
    """CTranslate2's own encoder output for JFK's first `frames` frames at `compute_type`,
    computed once for each pair (the int8 test and the float32 one share float32's)."""
    import functools

    import ctranslate2

    @functools.cache
    def encoded(compute_type: str, frames: int = 3000) -> np.ndarray:
        model = ctranslate2.models.Whisper(
            str(embedded.path), device="cpu", compute_type=compute_type
        )
        features = np.ascontiguousarray(jfk_features[..., :frames])
        storage = ctranslate2.StorageView.from_array(features)
        return np.asarray(model.encode(storage, to_cpu=True))

    return encoded


def _graph_encoded(graphs, precision: str, features: np.ndarray) -> np.ndarray:
    from kvscribe.backends.ctranslate2.encoder import OnnxEncoder

    return OnnxEncoder(graphs[precision], threads=2, precision=precision)(features)


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_a_window_encoded_on_one_thread_equals_the_every_thread_session(
    graphs, jfk_features, precision
):
    """A batch's rows are encoded by the replicas that decode them, on one thread each and
    two at once (group_encoding.SpreadRows); a lone window on every thread. The outputs
    are the same bit for bit, so which way a row went never shows in the text."""
    from concurrent.futures import ThreadPoolExecutor

    from kvscribe.backends.ctranslate2.encoder import OnnxEncoder

    encoder = OnnxEncoder(graphs[precision], threads=2, precision=precision)
    windows = [jfk_features[0], np.ascontiguousarray(jfk_features[0][:, ::-1])]  # two inputs
    together = [encoder(window[None]) for window in windows]
    with ThreadPoolExecutor(2) as pool:
        alone = list(pool.map(encoder.encode_here, windows))
    for one, every in zip(alone, together, strict=True):
        assert one.shape == every.shape == (1, 1500, 384)
        assert np.array_equal(one, every)
    assert not np.array_equal(alone[0], alone[1])  # two windows, two outputs


@pytest.mark.parametrize("frames", [3000, 1000])
def test_the_float32_graph_computes_ctranslate2s_encoder(graphs, ct2_encoded, jfk_features, frames):
    """Any window up to 30 s (live mode encodes shorter ones): the positional embedding is
    sliced to the frames given, as CTranslate2 slices it."""
    features = np.ascontiguousarray(jfk_features[..., :frames])
    ours = _graph_encoded(graphs, "float32", features)
    theirs = ct2_encoded("float32", frames)
    assert ours.shape == theirs.shape == (1, frames // 2, 384)
    assert np.abs(ours - theirs).max() < 1e-3 * np.abs(theirs).max()


def test_the_int8_graph_errs_as_little_as_ctranslate2s_int8(graphs, ct2_encoded, jfk_features):
    """Per-row activation scales, as CTranslate2 quantizes: onnxruntime's own dynamic
    quantization (one scale per matrix) had twice CTranslate2's error on this window."""
    exact = ct2_encoded("float32")
    ours = np.abs(_graph_encoded(graphs, "int8", jfk_features) - exact).mean()
    theirs = np.abs(ct2_encoded("int8") - exact).mean()
    assert 0 < ours < 1.3 * theirs, (ours, theirs)


def test_the_graph_is_written_whole_or_not_at_all(embedded, tmp_path, monkeypatch):
    """A write that fails part-way leaves neither the graph nor its staging file."""
    import onnx

    from kvscribe.models import onnx_encoder

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx, "save", disk_full)
    with pytest.raises(OSError):
        onnx_encoder.write(embedded.path, tmp_path / "int8.onnx", "int8")
    assert list(tmp_path.iterdir()) == []


def _loaded(setting: str | None):
    """The ctranslate2 backend, loaded afresh, with `[ctranslate2] encoder = setting` (None:
    the key left out)."""
    from kvscribe import profile
    from tests import loaded

    chosen = profile.load("cpu-laptop")
    section = dict(chosen.settings_for("ctranslate2"))
    section.pop("encoder", None)
    if setting is not None:
        section["encoder"] = setting
    return loaded.fresh("ctranslate2", backends={**chosen.backends, "ctranslate2": section})


def _records_of_its_own(folder, monkeypatch) -> None:
    """`folder` as the cache, its models the run's (the int8 copy and the encoder graph,
    written once for every test): the timing's record is the only thing made afresh."""
    from kvscribe.paths import cache_dir

    models = cache_dir() / "models"
    models.mkdir(parents=True, exist_ok=True)
    (folder / "models").symlink_to(models, target_is_directory=True)
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(folder))


def test_auto_times_both_encoders_once_and_keeps_the_choice(tmp_path, monkeypatch):
    from kvscribe.backends.ctranslate2.encoder import OnnxEncodedModel
    from kvscribe.paths import cache_dir

    _records_of_its_own(tmp_path, monkeypatch)
    first = _loaded(None)  # a profile without the key: "auto"
    row = first.describe_settings()["encoder"]
    (record,) = (cache_dir() / "encoders").glob("*.json")
    timed = json.loads(record.read_text(encoding="utf-8"))["seconds_per_window"]
    assert set(timed) == {"onnxruntime", "ctranslate2"} and all(s > 0 for s in timed.values())
    faster = min(timed, key=timed.get)
    assert row.startswith(faster) and "measured on this machine" in row
    assert isinstance(first.engine.model, OnnxEncodedModel) == (faster == "onnxruntime")

    # The kept record decides the next load: made to say the other way, it is obeyed.
    slower = max(timed, key=timed.get)
    swapped = {faster: timed[slower], slower: timed[faster]}
    record.write_text(json.dumps({"seconds_per_window": swapped}), encoding="utf-8")
    second = _loaded("auto")
    assert second.describe_settings()["encoder"].startswith(slower)
    assert isinstance(second.engine.model, OnnxEncodedModel) == (slower == "onnxruntime")


def _busy_cores(seconds: float) -> list[subprocess.Popen]:
    """A process spinning on each core, each stopping by itself after `seconds`."""
    spin = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]


def _stopped(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait(timeout=10)


def test_other_work_is_the_cores_busy_time_less_this_processs_own():
    """What a timing shared the cores with: processes spinning on every core take most of
    them; this process's own spinning is not counted as other work."""
    from kvscribe.machine.cpu_load import OtherWork

    hogs = _busy_cores(30)
    try:
        time.sleep(0.2)  # the spinners started
        with OtherWork() as beside_others:
            time.sleep(0.5)
    finally:
        _stopped(hogs)
    assert beside_others.share is not None and beside_others.share >= 0.5
    with OtherWork() as alone:
        started, own = time.perf_counter(), time.process_time()
        while time.perf_counter() - started < 0.5:
            pass  # one core: this process's own work
        own = time.process_time() - own
    wall = time.perf_counter() - started
    cores = os.cpu_count() or 1
    # Whatever else the machine runs (another test worker), this process's own spinning is
    # not in it.
    assert alone.share is not None and alone.share + own / (wall * cores) <= 1.0 + 0.05


def test_a_timing_beside_other_work_says_so_and_is_timed_again_when_old_and_quiet(
    tmp_path, monkeypatch
):
    """An encoder timing keeps the share of the cores other work took meanwhile (OtherWork,
    above); one taken beside a busy machine measured the share each engine got: the choice
    says so, and a run an hour later on a quiet machine times them again
    (backends/ctranslate2/encoder.py, _time_again). The record is made to say 50 %, as the
    test above makes other work for real (here it would only spin beside a model load); a
    quiet machine cannot be made while other tests run beside this one: the load average is
    injected."""
    from kvscribe.machine import cpu_load
    from kvscribe.paths import cache_dir

    _records_of_its_own(tmp_path, monkeypatch)
    _loaded(None)
    (record,) = (cache_dir() / "encoders").glob("*.json")
    kept = json.loads(record.read_text(encoding="utf-8"))
    assert 0.0 <= kept["other_work"] <= 1.0  # measured with the timing

    def contended() -> None:
        record.write_text(json.dumps(kept | {"other_work": 0.5}), encoding="utf-8")

    contended()
    row = _loaded(None).describe_settings()["encoder"]
    assert row.endswith("while other work kept 50% of the cores busy)"), row

    hour_ago = time.time() - 3700
    os.utime(record, (hour_ago, hour_ago))
    monkeypatch.setattr(cpu_load, "quiet", lambda below: False)
    _loaded(None)
    assert record.stat().st_mtime == hour_ago  # busy now: the old timing stays
    monkeypatch.setattr(cpu_load, "quiet", lambda below: True)
    _loaded(None)
    assert record.stat().st_mtime > hour_ago + 3000  # quiet now: timed again and kept
    again = json.loads(record.read_text(encoding="utf-8"))
    assert set(again["seconds_per_window"]) == {"onnxruntime", "ctranslate2"}
    contended()  # contended again, but timed just now
    fresh = record.stat().st_mtime
    _loaded(None)
    assert record.stat().st_mtime == fresh  # not again within the hour


@pytest.mark.parametrize("setting", ["onnxruntime", "ctranslate2"])
def test_either_encoder_transcribes_jfk(setting):
    from kvscribe.audio import load_audio
    from kvscribe.backends.ctranslate2.encoder import OnnxEncodedModel
    from kvscribe.contract import DecodeRequest

    backend = _loaded(setting)
    assert isinstance(backend.engine.model, OnnxEncodedModel) == (setting == "onnxruntime")
    assert backend.describe_settings()["encoder"].startswith(setting)
    run = backend.transcribe(load_audio(SAMPLE), DecodeRequest())
    assert wer(SAMPLE_TEXT, " ".join(s.text for s in run.segments)) < 0.1


def test_a_bad_encoder_setting_is_a_one_line_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.toml").write_text('[ctranslate2]\nencoder = "gpu"\n')
    result = run_cli(SAMPLE, "--profile", "mine")
    assert result.code == 2, result.stderr
    assert "encoder" in result.stderr and "auto" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_chunk_is_denied_the_tokens_a_full_window_allows():
    """The token bound by audio length (kvscribe.decoding.tokens_heard) only cuts what a
    chunk's seconds cannot hold: a full 30 s chunk keeps Whisper's 224 new tokens."""
    from kvscribe.decoding import tokens_heard

    assert tokens_heard(30.0) >= 448 // 2
    assert tokens_heard(1.0) < 448 // 4


def test_two_halves_side_by_side_encode_each_on_its_own_thread(jfk_features, monkeypatch):
    """`--batch-size 1` decodes a long input as two halves at once, one per core
    (backends/ctranslate2/halves.py): each half's windows go through onnxruntime's
    one-thread session, not both through the every-thread one, with the same output."""
    from kvscribe.backends.ctranslate2.encoder import OnnxEncoder
    from tests import loaded

    backend = loaded.ctranslate2_on_threads(2, encoder="onnxruntime")
    alone, calls = OnnxEncoder.encode_here, []

    def counted(encoder, features):
        calls.append(features.shape)
        return alone(encoder, features)

    monkeypatch.setattr(OnnxEncoder, "encode_here", counted)
    half = backend._engines.beside()
    ours = np.asarray(half.model.encode(jfk_features))
    assert calls == [jfk_features.shape[1:]]  # one window, on the thread alone
    every = np.asarray(backend.engine.model.encode(jfk_features))
    assert len(calls) == 1  # the batched engine's lone window: every thread
    assert np.array_equal(ours, every)


@pytest.mark.parametrize(("ratio", "calls"), [(3.0, 2), (1.1, 3)])
def test_a_second_round_is_timed_only_where_the_first_is_close(ratio, calls):
    """Encoders that sleep for their time (the rule, not the engines, is what is checked):
    each is warmed up, then timed once where one takes `ratio` times the other; a second
    round only where the first leaves them within 1.5x."""
    import time

    from kvscribe.backends.ctranslate2.encoder import _seconds_per_window

    called = {"fast": 0, "slow": 0}

    def sleeper(name: str, seconds: float):
        def encode(windows):
            called[name] += 1
            time.sleep(seconds)

        return encode

    windows = np.zeros((1, 80, 3000), np.float32)
    timed = _seconds_per_window(
        {"slow": sleeper("slow", 0.02 * ratio), "fast": sleeper("fast", 0.02)}, windows
    )
    assert called == {"fast": calls, "slow": calls}
    assert timed["fast"] < timed["slow"]
