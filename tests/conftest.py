"""Shared fixtures: the shipped sample, files derived from it, the real CLI, WER."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvscribe.machine.capacity import usable_physical_cores  # os only: loads no numpy


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist (`-n auto` in pyproject.toml), each worker's share of the cores in
    OMP_NUM_THREADS before torch or CTranslate2 start their thread pools: kvscribe's thread
    defaults read it (kvscribe/machine/capacity.py), here and in every CLI process a test starts, so
    two workers run two one-thread decodes instead of two two-thread ones on the same cores."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if workers.isdigit() and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, usable_physical_cores() // int(workers)))


_share_the_cores_between_workers()


def pytest_configure(config) -> None:
    """kvscribe's bytecode, once, before any worker or `kvscribe` process imports it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        from tests.bytecode import compile_kvscribe

        compile_kvscribe()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per physical core this process may use (xdist's own count
    takes every logical CPU on machines without psutil), and one more: the microphone, live
    replay and cluster tests wait on the clock, and the extra worker decodes meanwhile (on 2
    cores of an AMD EPYC: 22 min 37 s against 28 min 33 s, 1.89 cores busy on average). At
    most 9: each holds its models."""
    return min(usable_physical_cores() + 1, 9)


# Then, before anything loads numpy: numpy's BLAS on one thread, as the `kvscribe`
# command sets it, so results computed in the test process match the CLI's.
import kvscribe.cli  # noqa: E402, F401  # isort: skip
from tests.cpu_log import pytest_runtest_protocol  # noqa: E402, F401  (each test's CPU, on ask)
from tests.module_order import longest_first, read_ranking  # noqa: E402
from tests.signal_guard import signals_as_found  # noqa: E402, F401  (Ctrl-C reaches children)
from tests.temp_guard import (  # noqa: E402, F401  (no temporary file left behind)
    no_temporary_files_left_behind,
    pytest_sessionfinish,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "jfk.wav"
SAMPLE_TEXT = (ROOT / "samples" / "jfk.txt").read_text(encoding="utf-8")
# The project's eval corpus (sources and licences: eval/MANIFEST.tsv).
EVAL_DIR = ROOT / "eval" / "clips"
# Real short clips for runs whose words are not the claim (or are checked against the
# clip's own reference): each still encodes one whole 30 s window, as the 11 s sample
# does, and decodes a tenth or a quarter of its tokens.
CARDS = EVAL_DIR / "ps_cards_001.wav"  # 1.1 s, three words
CARDS_TEXT = CARDS.with_suffix(".txt").read_text(encoding="utf-8")
FOX = EVAL_DIR / "audioeval_kokoro_en_quick_brown_fox.wav"  # 2.9 s, a whole sentence
FOX_TEXT = FOX.with_suffix(".txt").read_text(encoding="utf-8")
KVSCRIBE = Path(sys.executable).parent / "kvscribe"
# The user's own cache and config, before tests point them at temporary folders.
USER_DIRS = {name: os.environ.get(name) for name in ("KVSCRIBE_CACHE_DIR", "KVSCRIBE_CONFIG_DIR")}


# What a fixture needs; `whispercpp`, `transformers` and `cluster` tests run the real model too.
LANE_BY_FIXTURE = {"whisper_cli": "whispercpp", "ct2_backend": "model", "onnx_export": "onnx"}
IMPLY_MODEL = ("whispercpp", "transformers", "cluster", "onnx")
BACKEND_LANES = ("whispercpp", "transformers", "onnx")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """A test that asks for a lane's fixture, or is parametrized by a backend's name, is in
    that lane, so `-m` selects by need without every module repeating what its fixtures
    already say. Runs before `-m` deselects. Then the modules are put in the order the
    workers should take them: longest first (tests/module_order.py)."""
    for item in items:
        for fixture, marker in LANE_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        params = getattr(getattr(item, "callspec", None), "params", {})
        for value in params.values():  # parametrized by a backend's name: that backend's lane
            if isinstance(value, str) and value in BACKEND_LANES:
                item.add_marker(value)
        if any(item.get_closest_marker(lane) for lane in IMPLY_MODEL):
            item.add_marker("model")
    longest_first(items, read_ranking())  # the workers take the longest modules first


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before each test, collect, then freeze what is left out of the cyclic collector
    (cheap: frozen objects are not walked again). What earlier tests keep (shared backends,
    cached results, hypothesis' state) grows with every module, and every full
    collection during a test walked them all: the transformers streaming tests ran 1.4x
    slower after the profile tests than alone. Objects freed later by their reference
    counts still go; only cycles among frozen objects stay until the run ends."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def onnx_export():
    """The embedded tiny.en exported to ONNX (`kvscribe setup onnx --compute-type int8`: the
    float32 graphs and the int8 copies the built-in profiles run) in the user's cache, where
    module fixtures resolve models (as whisper_cli builds there): found, or exported once
    (seconds). Skipped without the onnx extra."""
    pytest.importorskip("onnx", reason="no onnx extra: pip install 'kvscribe[onnx]'")
    from kvscribe.backends.onnx import export

    with pytest.MonkeyPatch.context() as users:
        for name, value in USER_DIRS.items():
            if value is None:
                users.delenv(name, raising=False)
            else:
                users.setenv(name, value)
        return export.find(compute_type="int8") or export.export(compute_type="int8")


@pytest.fixture(scope="session")
def tiny_ggml(tmp_path_factory) -> Path:
    """tiny.en as a ggml file, converted here by kvscribe's writer (whisper-cli run directly)."""
    from kvscribe.models import ggml, resolve

    source = resolve("tiny.en", ("ctranslate2",))
    return ggml.from_ctranslate2(source.path, tmp_path_factory.mktemp("ggml") / "tiny.en.bin")


@pytest.fixture(scope="session")
def whisper_cli() -> Path:
    """The real whisper-cli every whispercpp test runs: found, or built into the user cache
    (kvscribe setup whisper-cpp, ~3 min cold) the first time a selected test needs it, and
    exported so CLI children use the same binary despite the isolated cache."""
    from kvscribe.backends.whispercpp import binary

    with pytest.MonkeyPatch.context() as users:  # the user's cache, not a test's own
        for name, value in USER_DIRS.items():
            if value is None:
                users.delenv(name, raising=False)
            else:
                users.setenv(name, value)
        path = _find_or_build_whisper_cli()
    os.environ[binary.ENV_VAR] = str(path)
    return path


def _find_or_build_whisper_cli() -> Path:
    from kvscribe.backends.whispercpp import binary, build
    from kvscribe.errors import KvscribeError

    found = binary.patched()  # the suite tests kvscribe's patched build (KV cache types)
    if found is not None:
        return found.path
    sys.stderr.write("\nkvscribe tests: building whisper-cli (kvscribe setup whisper-cpp)...\n")
    try:  # parallel workers wait for one build (its lock), then find it
        return build.build(lambda what, fraction: None, unless_found=binary.patched)
    except KvscribeError as exc:
        pytest.fail(f"no whisper-cli for the whispercpp tests: {exc.one_line()}")


@pytest.fixture(autouse=True)
def _lane_needs(request):
    """A test marked `whispercpp` gets whisper-cli even when it only runs the CLI."""
    if request.node.get_closest_marker("whispercpp") is not None:
        request.getfixturevalue("whisper_cli")


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    """No test touches the user's cache/config or the network. The test cache is one for
    the whole run, its workers' too (an xdist worker's base folder is inside the run's):
    what kvscribe writes there once per model (its int8 copy, its encoder graph, the
    conversions for the other engines) was written again by each worker, and a test that
    needs an empty cache sets its own. Writers racing for one entry is what kvscribe's own
    --jobs workers do: each writes a copy of its own and one rename wins."""
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(run_folder(tmp_path_factory) / "cache"))
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def run_folder(tmp_path_factory) -> Path:
    """The test run's folder, one for all its xdist workers (a worker's base folder is
    inside the run's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after Whisper's English normalisation."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    normalize = EnglishTextNormalizer()
    return jiwer.wer(normalize(reference), normalize(hypothesis))


def basic_normalised(text: str) -> str:
    """Whisper's basic normaliser, diacritics removed (the Spanish references have none)."""
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer(remove_diacritics=True)(text)


def longest_deleted_run(reference: str, hypothesis: str) -> int:
    """The most reference words in a row that `hypothesis` lacks (basic normaliser): a phrase
    lost whole, where a WER would only say how many words."""
    import jiwer

    alignment = jiwer.process_words(basic_normalised(reference), basic_normalised(hypothesis))
    runs = [c.ref_end_idx - c.ref_start_idx for c in alignment.alignments[0] if c.type == "delete"]
    return max(runs, default=0)


def pooled_wer(pairs) -> float:
    """Corpus WER over (reference, hypothesis) pairs: errors over normalised reference words.

    Pooling must count normalised words: the normaliser turns "one two ... ten" into one
    token, and weighting by raw words would let one such clip dominate.
    """
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    normalize = EnglishTextNormalizer()
    references, hypotheses = zip(*((normalize(r), normalize(h)) for r, h in pairs), strict=True)
    return jiwer.wer(list(references), list(hypotheses))


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, cwd: Path | None = None, timeout: float = 300) -> Result:
    """Run the installed `kvscribe` executable for real."""
    proc = subprocess.run(
        [str(KVSCRIBE), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=os.environ.copy(),
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


# The long-form clip's first 61.5 s end in a pause after "...around the hills.": three windows
# (or three speech chunks) and more than a streamed file's 60 s history, at a third of the
# decoding.
LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"
LONG_FORM_HEAD = (61.5, "around the hills.")
# Its first 41.2 s end in the pause after "...and distant planets.": two 30 s windows (or
# two speech chunks, batched), at two thirds of the head's decoding.
LONG_FORM_TWO_CHUNKS = (41.2, "distant planets.")


@pytest.fixture(scope="session")
def long_form_head(tmp_path_factory) -> Path:
    """The long-form clip's head as a 16-bit WAV, its reference text beside it (.txt)."""
    return _long_form_start(tmp_path_factory, "espeak_longform_en_head", *LONG_FORM_HEAD)


@pytest.fixture(scope="session")
def long_form_two_chunks(tmp_path_factory) -> Path:
    """The long-form clip's first two windows as a 16-bit WAV, its reference text beside it."""
    return _long_form_start(tmp_path_factory, "espeak_longform_en_two", *LONG_FORM_TWO_CHUNKS)


def _long_form_start(tmp_path_factory, name: str, seconds: float, last_words: str) -> Path:
    from kvscribe.audio import SAMPLE_RATE, load_audio
    from tests import media

    text = LONG_FORM.with_suffix(".txt").read_text(encoding="utf-8")
    path = tmp_path_factory.mktemp(name) / f"{name}.wav"
    media.write_wav(path, load_audio(LONG_FORM)[: int(seconds * SAMPLE_RATE)])
    path.with_suffix(".txt").write_text(
        text[: text.index(last_words) + len(last_words)], encoding="utf-8"
    )
    return path


@pytest.fixture(scope="session")
def derived(tmp_path_factory) -> dict[str, Path]:
    """The sample re-encoded and damaged in every way the tests need (made once)."""
    from tests import media

    return media.make_all(SAMPLE, tmp_path_factory.mktemp("derived"))


@pytest.fixture(scope="session")
def ct2_backend():
    """The real CTranslate2 backend with the embedded tiny.en, loaded once."""
    from kvscribe import models, profile, registry
    from tests import loaded

    backend_cls = registry.get("ctranslate2")
    model = models.resolve(None, backend_cls.capabilities.model_formats)
    backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
    backend.load()
    loaded.remember_ct2_encodings(backend)
    return backend
