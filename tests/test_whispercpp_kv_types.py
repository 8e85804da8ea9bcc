"""kvscribe's patched whisper.cpp: quantized KV caches, quantized weights, the patch itself.

Every run is the real patched whisper-cli (built by `kvscribe setup whisper-cpp`) on real
models and audio. The cache sizes are checked against block arithmetic written out here,
independently of kvscribe's own (backends/whispercpp/kvtypes.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvscribe.backends.whispercpp import binary, patching
from kvscribe.backends.whispercpp.kvtypes import CacheTypes, from_policy
from kvscribe.backends.whispercpp.process import write_wav_f32
from kvscribe.errors import BackendUnavailableError
from kvscribe.kvcache.spec import parse_policy
from kvscribe.models import ggml, resolve
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer

pytestmark = [pytest.mark.whispercpp]

# ggml block layouts, from ggml-common.h: Q8_0 = 32 int8 + one fp16 scale, Q4_0 = 32
# nibbles + one fp16 scale; F16 = 2 bytes a value.
BYTES_PER_VALUE = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def _stats(tmp_path: Path, *args) -> dict:
    stats = tmp_path / "stats.json"
    result = run_cli(SAMPLE, "-b", "whispercpp", "--stats-json", stats, "-q", *args)
    assert result.code == 0, result.stderr
    text = re.sub(r"^\[[^\]]*\]\s*", "", result.stdout, flags=re.M)  # "[0:00 --> 0:08]  "
    return {"text": text, **json.loads(stats.read_text())}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_quantized_caches_transcribe_the_sample(whisper_cli, tmp_path, kind):
    report = _stats(tmp_path, "--kv-policy", kind, "--kv-cross", f"shared,{kind}")
    assert wer(SAMPLE_TEXT, report["text"]) <= 0.1
    assert report["engine_kv_types"] == {"kv self": kind, "kv cross": kind}
    assert report["settings"]["kv cache types"] == f"self {kind}, cross {kind}"
    f16 = report["engine_kv_f16_bytes_derived"]
    ratio = report["engine_memory_bytes"]["kv cross"] / f16["kv cross"]
    assert ratio == pytest.approx(BYTES_PER_VALUE[kind] / 2, abs=0.005)


@pytest.mark.slow
def test_tiny_vram_profile_stores_both_caches_in_q8_0(whisper_cli, tmp_path):
    report = _stats(tmp_path, "-p", "tiny-vram")
    assert report["engine_kv_types"] == {"kv self": "q8_0", "kv cross": "q8_0"}
    assert any("window/sink" in note for note in report["not_applicable"])
    assert wer(SAMPLE_TEXT, report["text"]) <= 0.1


def _printed_sizes(cli: Path, model: Path, kind: str, tmp_path: Path) -> dict[str, float]:
    wav = tmp_path / "second.wav"
    write_wav_f32(wav, np.zeros(16000, dtype=np.float32))
    # The caches are sized and printed as the model loads, before the audio is read; -d 1
    # (process 1 ms: too short to decode) then ends the run without encoding a window.
    argv = [cli, "-m", model, "-f", wav, "-fa", "-ng", "-t", "1", "-kvs", kind, "-kvc", kind]
    argv += ["-d", "1"]
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.findall(r"kv (self|cross) size *= *([\d.]+) MB \((\w+)\)", done.stderr)
    assert {(what, printed_kind) for what, _, printed_kind in found} == {
        ("self", kind),
        ("cross", kind),
    }
    return {what: float(mb) for what, mb, _ in found}


@pytest.mark.parametrize("name", ["tiny.en", "base"])
@pytest.mark.parametrize("kind", ["f16", "q8_0", "q4_0"])
@pytest.mark.slow
def test_printed_cache_sizes_are_the_block_arithmetic(whisper_cli, tmp_path, name, kind):
    model = resolve(name, ("ggml",)).path
    dims, _ = ggml.read_dims(model)
    # K and V, every decoder layer, positions padded to a multiple of 256 (448 -> 512 text
    # positions, 1500 -> 1536 audio frames), n_text_state values each.
    pad = lambda n: (n + 255) // 256 * 256  # noqa: E731
    per_position = 2 * dims.n_text_layer * dims.n_text_state * BYTES_PER_VALUE[kind]
    printed = _printed_sizes(whisper_cli, model, kind, tmp_path)
    assert printed["self"] == round(pad(dims.n_text_ctx) * per_position / 1e6, 2)
    assert printed["cross"] == round(pad(dims.n_audio_ctx) * per_position / 1e6, 2)


def test_a_quantized_cache_without_flash_attention_is_refused(whisper_cli):
    result = run_cli(SAMPLE, "-b", "whispercpp", "-p", "no-loss", "--kv-policy", "q8_0")
    assert result.code == 2
    assert "needs flash attention" in result.stderr and "no-loss.toml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_whisper_cli_itself_refuses_a_quantized_cache_without_flash_attention(
    whisper_cli, tmp_path
):
    model = resolve("tiny.en", ("ggml",)).path
    argv = [whisper_cli, "-m", model, "-f", SAMPLE, "-nfa", "-kvc", "q4_0"]
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "--kv-cross-type q4_0 needs flash attention" in done.stderr


def _unpatched(tmp_path: Path, real: Path) -> Path:
    """Fault injection: whisper.cpp 1.8.5 without kvscribe's patch (a second 3-minute build
    is not worth it) plays as the real binary with -kvs/-kvc gone from its --help and
    rejected the way whisper-cli rejects any unknown flag."""
    script = tmp_path / "whisper-cli"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -kvs|-kvc) '
        'echo "error: unknown argument: $a" >&2; exit 0;; esac; done\n'
        f'if [ "$1" = "--help" ]; then "{real}" --help 2>&1 | "{shutil.which("grep")}" '
        '-v -- "-kv[sc] " >&2; '
        "exit 0; fi\n"
        f'exec "{real}" "$@"\n'
    )
    script.chmod(0o755)
    return script


@pytest.mark.slow
def test_an_unpatched_whisper_cli_runs_profiles_at_f16_and_says_why(
    whisper_cli, tmp_path, monkeypatch
):
    monkeypatch.setenv(binary.ENV_VAR, str(_unpatched(tmp_path, whisper_cli)))
    report = _stats(tmp_path, "-p", "tiny-vram")
    assert wer(SAMPLE_TEXT, report["text"]) <= 0.1
    assert report["settings"]["kv cache types"] == "self f16, cross f16"
    notes = report["not_applicable"]
    assert any("type q8_0" in n and "no KV cache types" in n for n in notes), notes


def test_an_unpatched_whisper_cli_refuses_types_asked_for_by_name(
    whisper_cli, tmp_path, monkeypatch
):
    monkeypatch.setenv(binary.ENV_VAR, str(_unpatched(tmp_path, whisper_cli)))
    result = run_cli(SAMPLE, "-b", "whispercpp", "--kv-cross", "shared,q8_0")
    assert result.code == 6
    assert "no KV cache types" in result.stderr and "kvscribe setup whisper-cpp" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_quantized_weights_are_made_once_and_used(whisper_cli, tmp_path):
    greedy = ("--beam-size", "1")  # the weights are the claim, not the search
    first = _stats(tmp_path, "--compute-type", "q8_0", *greedy)
    assert wer(SAMPLE_TEXT, first["text"]) <= 0.1
    made = Path(re.search(r"\((/.+\.bin), by whisper-quantize\)", first["settings"]["weights"])[1])
    dims, file_type = ggml.read_dims(made)
    # whisper-quantize writes ggml's "mostly Q8_0" (7) plus its quantization version x 1000
    assert file_type % 1000 == 7 and dims.n_text_layer == 4
    assert ggml.verify(made) == dims.n_vocab  # every tensor whole
    stamp = made.stat().st_mtime_ns
    second = _stats(tmp_path, "--compute-type", "q8_0", *greedy)
    assert made.stat().st_mtime_ns == stamp and second["settings"] == first["settings"]


@pytest.mark.slow
def test_weights_without_whisper_quantize_a_profile_falls_back_a_flag_fails(
    whisper_cli, tmp_path, monkeypatch
):
    # The unpatched stand-in has no whisper-quantize beside it; a fresh cache has no
    # quantized file yet; PATH has none.
    monkeypatch.setenv(binary.ENV_VAR, str(_unpatched(tmp_path, whisper_cli)))
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    report = _stats(tmp_path, "-p", "tiny-vram")  # its [whispercpp] compute_type = "q8_0"
    assert "weights" not in report["settings"]
    assert any("weights q8_0: whisper-quantize not found" in n for n in report["not_applicable"])
    result = run_cli(SAMPLE, "-b", "whispercpp", "--compute-type", "q8_0")
    assert result.code == 6 and "whisper-quantize not found" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_weight_type_is_a_usage_error(whisper_cli):
    result = run_cli(SAMPLE, "-b", "whispercpp", "--compute-type", "int8")
    assert result.code == 2 and "unknown whisper.cpp weight type" in result.stderr


def _types(kv_self: str, kv_cross: str, n_layers: int) -> CacheTypes:
    return from_policy(parse_policy(kv_self, n_layers), kv_self, kv_cross)


def test_policies_map_to_one_type_per_cache():
    tiny_vram = _types("sink=4,window=128,q8_0", "shared,q8_0", 4)
    assert (tiny_vram.self_type, tiny_vram.cross_type) == ("q8_0", "q8_0")
    assert len(tiny_vram.not_applicable) == 1  # the window; the type itself is honoured
    mixed = _types("full; q8_0@layers=even", "shared", 4)
    assert mixed.self_type == "f16" and "per-layer" in mixed.not_applicable[0]
    no_loss = _types("full; half@layers=odd", "shared", 4)
    assert no_loss.self_type == "f16" and "half layers" in no_loss.not_applicable[0]
    per_beam = _types("q4_0,residual=8", "full", 6)
    assert per_beam.self_type == "q4_0"
    # A copy per beam cannot be had: said, as CTranslate2 says what it cannot honour.
    assert any("'per-beam': whisper.cpp keeps one copy" in n for n in per_beam.not_applicable)
    assert not any("cross" in n for n in _types("full", "shared", 4).not_applicable)


# -- the patch and its build ------------------------------------------------------------------


def test_the_patch_applies_only_to_the_text_it_was_written_for(tmp_path):
    (tmp_path / "src").mkdir()
    target = tmp_path / "src" / "a.c"
    target.write_text("one\ntwo\nthree\nfour\n")
    diff = (
        "diff --git a/src/a.c b/src/a.c\n--- a/src/a.c\n+++ b/src/a.c\n"
        "@@ -2,2 +2,3 @@\n two\n-three\n+THREE\n+3\n"
    )
    assert patching.apply(diff, tmp_path) == ["src/a.c"]
    assert target.read_text() == "one\ntwo\nTHREE\n3\nfour\n"
    with pytest.raises(patching.PatchError, match="line 3 differs"):
        patching.apply(diff, tmp_path)  # already applied: the context no longer matches
    assert target.read_text() == "one\ntwo\nTHREE\n3\nfour\n"  # left as it was


def test_a_removed_line_that_looks_like_a_file_header_is_read_as_a_line(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("--- a/old\nkeep\n")
    diff = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,1 @@\n---- a/old\n keep\n"
    patching.apply(diff, tmp_path)
    assert target.read_text() == "keep\n"


def test_the_built_binary_is_the_patched_one(whisper_cli):
    """The suite runs kvscribe's own build (tests/conftest.py builds it if need be)."""
    info = json.loads((whisper_cli.parent / "BUILD-INFO.json").read_text())
    assert info["patches"] == patching.patches_digest()
    assert whisper_cli.parent.name.endswith(f"-kv{patching.patches_digest()}-{os.uname().machine}")
    assert binary.takes_kv_types(whisper_cli)
    assert (whisper_cli.parent / binary.QUANTIZE_TOOL).is_file()


def test_a_changed_patch_means_a_new_build(whisper_cli, monkeypatch, tmp_path):
    # The patched build, installed where kvscribe's cache keeps it, is found...
    monkeypatch.delenv(binary.ENV_VAR)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no cmake, no whisper-cli
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path / "cache"))  # this test's own
    own = binary.own_build_path()
    own.parent.mkdir(parents=True)
    shutil.copy2(whisper_cli, own)
    assert binary.find().found_by == "kvscribe build"
    # ... until the patch changes: its hash keys the build dir, so setup builds again.
    texts = patching.patch_texts()
    name = patching.PATCHES[0]
    changed = {**texts, name: texts[name] + "\n"}
    monkeypatch.setattr(patching, "patch_texts", lambda: changed)
    assert binary.own_build_dir() != own.parent
    with pytest.raises(BackendUnavailableError, match="whisper-cli not found"):
        binary.find()
    from kvscribe.backends.whispercpp import build

    with pytest.raises(BackendUnavailableError, match="cmake"):  # it starts a build
        build.build(lambda what, fraction: None)
