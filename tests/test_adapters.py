"""Each undocumented part of faster-whisper kvscribe uses, checked against the installed
release (kvscribe/adapters/faster_whisper.py), and used from nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.errors import BackendUnavailableError
from tests.conftest import ROOT, SAMPLE

pytestmark = pytest.mark.model


def test_model_names_map_to_hub_repositories():
    repositories = adapter.model_repositories()
    assert repositories["tiny.en"].endswith("/faster-whisper-tiny.en")
    assert all(isinstance(k, str) and v.count("/") == 1 for k, v in repositories.items())


def test_the_assets_hold_the_silero_model():
    assert (adapter.assets_folder() / "silero_vad_v6.onnx").is_file()


def test_decoding_parts_build_transcribe_s_prompt_and_features(ct2_backend):
    engine = ct2_backend.engine
    tokens = adapter.tokenizer(engine, "transcribe", "en")
    prompt = adapter.prompt(engine, tokens, tokens.encode(" Hello"))
    assert prompt[0] == tokens.sot_prev and prompt[-1] == tokens.no_timestamps
    assert tokens.sot in prompt and tokens.encode(" Hello")[0] in prompt
    suppressed = adapter.suppressed_tokens(tokens)
    assert tokens.sot in suppressed and all(isinstance(t, int) for t in suppressed)
    assert adapter.max_length(engine) == 448
    features = adapter.window_features(engine, load_audio(SAMPLE))
    assert features.shape == (80, 3000) and features.dtype == np.float32


def test_words_are_aligned_and_punctuation_glued(ct2_backend):
    engine = ct2_backend.engine
    tokens = adapter.tokenizer(engine, "transcribe", "en")
    samples = load_audio(SAMPLE)
    encoded = adapter.encode(engine, adapter.window_features(engine, samples)[None])
    text = tokens.encode(" And so, my fellow Americans.")
    frames = round(samples.size / SAMPLE_RATE * 100)
    [alignment] = adapter.align(engine, tokens, [text], encoded, [frames], 7)
    adapter.merge_punctuations(alignment)
    words = [w["word"] for w in alignment if w["word"]]
    assert words == [" And", " so,", " my", " fellow", " Americans."]
    starts = [w["start"] for w in alignment if w["word"]]
    assert starts == sorted(starts) and 0 <= starts[0] < starts[-1] < samples.size / SAMPLE_RATE
    prepend, append = adapter.punctuation_defaults()
    assert "¿" in prepend and "," in append


def test_a_streamed_engine_reads_its_own_features_and_leaves_the_shared_one(ct2_backend):
    engine = ct2_backend.engine
    own = adapter.feature_extractor(engine)
    view = adapter.with_feature_extractor(engine, "stand-in")
    assert view.feature_extractor == "stand-in" and adapter.feature_extractor(engine) is own
    assert view.model is engine.model  # the weights are shared, not copied


def test_a_replica_view_runs_on_its_own_model_and_leaves_the_shared_one(ct2_backend):
    engine = ct2_backend.engine
    own = engine.model
    view = adapter.with_model(engine, "stand-in")
    assert view.model == "stand-in" and engine.model is own
    assert view.feature_extractor is engine.feature_extractor


def test_the_speech_clock_maps_kept_audio_back_to_the_input():
    clock = adapter.speech_clock([{"start": 16_000, "end": 32_000}], SAMPLE_RATE)
    assert clock.get_original_time(0.5) == pytest.approx(1.5)


def test_a_part_that_moved_is_one_line_naming_the_tested_release(monkeypatch):
    """Fault injection: an upgrade that drops the model-name table."""
    import faster_whisper.utils

    monkeypatch.delattr(faster_whisper.utils, "_MODELS")
    with pytest.raises(BackendUnavailableError) as raised:
        adapter.model_repositories()
    line = raised.value.one_line()
    assert "faster_whisper.utils._MODELS" in line and adapter.TESTED_RELEASE in line
    assert "\n" not in line


def _faster_whisper_names(path: Path) -> set[str]:
    """Every faster_whisper name the module imports (`import faster_whisper` alone: '')."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("faster_whisper"):
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names if a.name.startswith("faster_whisper")]
            names |= {"" if module == "faster_whisper" else module for module in modules}
    return names


def test_only_the_adapter_reaches_past_faster_whisper_s_documented_names():
    documented = {f"faster_whisper.{name}" for name in adapter.DOCUMENTED}
    documented |= {"faster_whisper.vad.VadOptions", ""}
    adapter_file = Path(adapter.__file__).resolve()
    for folder in ("kvscribe", "backends"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() != adapter_file:
                assert _faster_whisper_names(path) <= documented, path


def test_the_check_above_sees_an_undocumented_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from faster_whisper.utils import _MODELS\n")
    assert _faster_whisper_names(module) == {"faster_whisper.utils._MODELS"}
    module.write_text("import faster_whisper\nimport faster_whisper.transcribe\n")
    assert _faster_whisper_names(module) == {"", "faster_whisper.transcribe"}
