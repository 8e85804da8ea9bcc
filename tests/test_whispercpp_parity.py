"""The whispercpp backend honours issue 14's request fields against the real whisper-cli:
words from whisper.cpp's DTW token times (checked against faster-whisper's own words),
tokens / log-probabilities / windows from its full JSON, fallback thresholds and previous
text as flags, no text on silence, and the detected language's probability."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import statistics
import struct
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends.whispercpp.fulljson import Vocabulary
from kvscribe.backends.whispercpp.words import dtw_preset
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback, compression_ratio
from kvscribe.errors import UsageError
from kvscribe.models import resolve
from kvscribe.models.ct2_file import WhisperDims
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import EVAL_DIR, SAMPLE, SAMPLE_TEXT, wer

pytestmark = [pytest.mark.whispercpp, pytest.mark.eval]

# Short eval clips (one window each) of read speech, picked for speed.
EVAL_CLIPS = [
    EVAL_DIR / f"{name}.wav"
    for name in ("ps_librivox_ss01_0870", "ps_librivox_ss01_0890", "ps_librivox_ss01_0920")
]
CLIPS = [SAMPLE, *(clip for clip in EVAL_CLIPS if clip.exists())]
BEAMS = 5
MEDIAN_START_TOLERANCE = 0.2  # seconds: issue 14's bound against faster-whisper's words


@dataclasses.dataclass
class _Choice:
    """The options kvscribe.runner.load_backend reads."""

    backend: str = "whispercpp"
    profile: str = "cpu-laptop"
    model: str | None = None
    device: str | None = None
    kv_policy: str | None = None
    kv_cross: str | None = None


@functools.cache
def _backend(profile: str = "cpu-laptop", **section):
    """The whispercpp backend on the embedded tiny.en, `section` on top of the profile's."""
    from kvscribe import profile as profiles
    from kvscribe import registry

    base = profiles.load(profile)
    settings = {**base.settings_for("whispercpp"), **section}
    custom = dataclasses.replace(base, backends={**base.backends, "whispercpp": settings})
    backend = registry.get("whispercpp")(resolve("tiny.en", ("ggml",)), custom, "cpu")
    backend.load()
    return backend


@functools.cache
def _transcribed(clip: Path, word_timestamps: bool = True):
    run = _backend().transcribe(
        load_audio(clip), DecodeRequest(beam_size=BEAMS, word_timestamps=word_timestamps)
    )
    return list(run.segments), run


@pytest.fixture(scope="module")
def faster_whisper():
    """faster-whisper's WhisperModel on the embedded tiny.en, loaded once for the module, on
    one thread as each suite worker has (two threads read the same words, at more CPU)."""
    from faster_whisper import WhisperModel

    source = resolve(None, ("ctranslate2",))
    return WhisperModel(str(source.path), device="cpu", compute_type="float32", cpu_threads=1)


def _faster_whisper_words(model, audio: str | np.ndarray, **options):
    """faster-whisper's own word timestamps, the embedded tiny.en run directly (at beam
    BEAMS unless `options` say otherwise)."""
    options = {"beam_size": BEAMS, **options}
    segments, _ = model.transcribe(audio, word_timestamps=True, **options)
    return [w for s in segments for w in s.words]


def _normalised(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def _start_differences(ours, theirs) -> list[float]:
    """|start difference| of the words both have, matched by normalised text in order."""
    mine, other = [_normalised(w.word) for w in ours], [_normalised(w.word) for w in theirs]
    matcher = difflib.SequenceMatcher(None, mine, other, autojunk=False)
    return [
        abs(ours[block.a + k].start - theirs[block.b + k].start)
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    ]


def _check_words(segments) -> None:
    flat = [w for s in segments for w in s.words]
    assert flat, "no words"
    for segment in segments:
        assert "".join(w.word for w in segment.words).split() == segment.text.split()
        assert segment.words[0].word.startswith(" ")  # words keep the tokenizer's space
        for word in segment.words:
            assert 0.0 <= word.probability <= 1.0
            assert segment.start <= word.start <= word.end <= segment.end
    starts = [w.start for w in flat]
    assert starts == sorted(starts)


# -- words ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: c.stem)
def test_words_lie_in_their_segments_in_order_and_spell_the_text(whisper_cli, clip):
    segments, run = _transcribed(clip)
    _check_words(segments)
    assert run.report.settings["word timestamps"] == "DTW, heads of tiny.en (the model's name)"
    assert run.report.settings["flash attention"].startswith("off")


@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: c.stem)
def test_word_starts_agree_with_faster_whisper(whisper_cli, faster_whisper, clip):
    segments, _ = _transcribed(clip)
    ours = [w for s in segments for w in s.words]
    theirs = _faster_whisper_words(faster_whisper, str(clip))
    differences = _start_differences(ours, theirs)
    assert len(differences) >= 0.8 * len(theirs)
    assert statistics.median(differences) <= MEDIAN_START_TOLERANCE


@pytest.mark.slow
def test_words_only_when_asked_and_the_text_does_not_change(whisper_cli):
    plain, run = _transcribed(SAMPLE, word_timestamps=False)
    timed, _ = _transcribed(SAMPLE)
    assert all(s.words == () for s in plain) and "word timestamps" not in run.report.settings
    assert wer("".join(s.text for s in plain), "".join(s.text for s in timed)) <= 0.1


@pytest.mark.slow
def test_words_of_later_windows_and_parts_keep_the_input_clock(whisper_cli, faster_whisper):
    """66 s (the sample six times) on two whisper states (-p 2): the second part's segments
    are moved to the input's clock by whisper.cpp, their token times are not."""
    audio = np.tile(load_audio(SAMPLE), 6)
    backend = _backend(threads=2, batch_size=2)
    run = backend.transcribe(audio, DecodeRequest(beam_size=BEAMS, word_timestamps=True))
    segments = list(run.segments)
    assert run.report.batch_size == 2
    _check_words(segments)
    assert segments[-1].words[-1].end > 60
    seeks: dict[int, int] = {}
    for segment in segments:
        assert seeks.setdefault(segment.window, segment.seek) == segment.seek
        assert segment.seek <= round(segment.start * 100)  # a window starts before its text
    assert len(seeks) >= 3 and list(seeks) == sorted(seeks)
    assert list(seeks.values()) == sorted(set(seeks.values()))  # windows move forward
    # The sample tiled says its words ~3 times a window: every decode fails the compression
    # test, and faster-whisper's fallback would sample each window at every temperature.
    # Greedy: the reference's clock is the claim, not its search (it reads the same words).
    theirs = _faster_whisper_words(faster_whisper, audio, temperature=0.0, beam_size=1)
    differences = _start_differences([w for s in segments for w in s.words], theirs)
    assert len(differences) >= 0.8 * len(theirs)
    assert statistics.median(differences) <= MEDIAN_START_TOLERANCE


@pytest.mark.slow
def test_a_profile_s_quantized_caches_give_way_to_dtw(whisper_cli):
    backend = _backend("tiny-vram")  # q8_0 self and cross caches, flash attention on
    run = backend.transcribe(load_audio(SAMPLE), DecodeRequest(word_timestamps=True))
    segments = list(run.segments)
    _check_words(segments)
    assert run.report.settings["kv cache types"] == "self f16, cross f16"
    assert run.report.engine_kv_types in ({}, {"kv self": "f16", "kv cross": "f16"})
    assert any("DTW" in note and "ran F16" in note for note in run.report.not_applicable)


def test_quantized_caches_asked_for_with_word_timestamps_are_a_usage_error(whisper_cli):
    from kvscribe.runner import load_backend

    backend, _ = load_backend(_Choice(kv_policy="q8_0", kv_cross="shared,q8_0"))
    with pytest.raises(UsageError) as caught:
        backend.transcribe(load_audio(SAMPLE), DecodeRequest(word_timestamps=True))
    line = caught.value.one_line()
    assert "\n" not in line and "--word-timestamps" in line and "--kv-policy" in line


def test_dtw_presets_by_name_then_by_dimensions():
    tiny_en = WhisperDims(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
    assert dtw_preset("tiny.en", tiny_en).preset == "tiny.en"
    assert dtw_preset("/models/ggml-base.en.bin", tiny_en).preset == "base.en"
    assert dtw_preset("ggml-small-q5_0.bin", tiny_en).preset == "small"
    assert dtw_preset("large-v3-turbo", tiny_en).preset == "large.v3.turbo"
    guessed = dtw_preset("my-finetune", tiny_en)
    assert guessed.preset == "tiny.en" and "dimensions" in guessed.how
    odd = dataclasses.replace(tiny_en, n_text_layer=5)
    assert dtw_preset("my-finetune", odd).preset is None


# -- segments from the full JSON ----------------------------------------------------------------


def _ggml_vocabulary(path: Path) -> list[bytes]:
    with open(path, "rb") as handle:
        handle.seek(4 + 44)
        n_mel, n_freq = struct.unpack("<2i", handle.read(8))
        handle.seek(4 * n_mel * n_freq, 1)
        (count,) = struct.unpack("<i", handle.read(4))
        vocabulary = []
        for _ in range(count):
            (length,) = struct.unpack("<I", handle.read(4))
            vocabulary.append(handle.read(length))
    return vocabulary


@pytest.mark.slow
def test_segments_carry_text_tokens_logprob_window_and_compression_ratio(whisper_cli):
    segments, run = _transcribed(SAMPLE, word_timestamps=False)
    vocabulary = _ggml_vocabulary(_backend().model_file)
    assert segments and [s.id for s in segments] == list(range(len(segments)))
    for segment in segments:
        spelled = b"".join(vocabulary[t] for t in segment.tokens).decode("utf-8")
        assert spelled == segment.text  # text tokens only, all of them
        assert -1.0 < segment.avg_logprob < 0
        assert segment.compression_ratio == compression_ratio(segment.text)
        assert segment.seek == 0 and segment.window == 0 and segment.temperature is None
    assert run.report.tokens > sum(len(s.tokens) for s in segments)  # + timestamp tokens
    assert wer(SAMPLE_TEXT, "".join(s.text for s in segments)) <= 0.1


def test_special_tokens_follow_the_vocabulary_size():
    english, multilingual, v3 = Vocabulary(51864), Vocabulary(51865), Vocabulary(51866)
    assert (english.eot, english.timestamp_begin, english.multilingual) == (50256, 50363, False)
    assert (multilingual.eot, multilingual.timestamp_begin) == (50257, 50364)
    assert v3.timestamp_begin == 50365 and v3.timestamp(50365 + 7) == 7
    assert english.timestamp(50256) is None and english.is_text(50255)


# -- silence ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["digital silence", "low white noise"])
def test_silence_and_low_noise_give_no_text(whisper_cli, kind):
    """The must-show of issue 14: not "You", nor whisper.cpp's "[BLANK_AUDIO]" or "♪♪"."""
    samples = 20 * SAMPLE_RATE
    if kind == "digital silence":
        audio = np.zeros(samples, dtype=np.float32)
    else:
        audio = (np.random.default_rng(14).standard_normal(samples) * 0.003).astype(np.float32)
    run = _backend().transcribe(audio, DecodeRequest())
    assert [s.text for s in run.segments if s.text.strip()] == []
    assert "dropped" in run.report.settings["non-speech annotations"]


# -- flags ----------------------------------------------------------------------------------------


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_default_request_flags_are_openai_whisper_s_defaults(whisper_cli, tmp_path):
    argv = _backend().argv_for(tmp_path / "a.wav", tmp_path / "out", DecodeRequest(), BEAMS)
    assert (_flag(argv, "-tp"), _flag(argv, "-tpi"), _flag(argv, "-bo")) == ("0", "0.2", "5")
    assert (_flag(argv, "-lpt"), _flag(argv, "-nth"), _flag(argv, "-et")) == ("-1", "0.6", "2.4")
    assert "-nf" not in argv and "-dtw" not in argv and "-fa" in argv
    words = _backend().argv_for(
        tmp_path / "a.wav", tmp_path / "out", DecodeRequest(word_timestamps=True), BEAMS
    )
    assert _flag(words, "-dtw") == "tiny.en" and "-nfa" in words and "-fa" not in words


def test_fallback_prompt_and_context_become_whisper_cli_flags(whisper_cli, tmp_path):
    backend = _backend(max_context=64)
    fallback = Fallback(
        temperatures=(0.2, 0.4, 0.6, 0.8, 1.0),
        compression_ratio_threshold=None,
        logprob_threshold=-0.5,
        no_speech_threshold=None,
        best_of=3,
    )

    def argv(**fields):
        return backend.argv_for(tmp_path / "a.wav", tmp_path / "o", DecodeRequest(**fields), 2)

    custom = argv(fallback=fallback, prompt="Kennedy:", condition_on_previous_text=True)
    assert (_flag(custom, "-tp"), _flag(custom, "-tpi"), _flag(custom, "-bo")) == (
        "0.2",
        "0.2",
        "3",
    )
    assert (_flag(custom, "-lpt"), _flag(custom, "-nth"), _flag(custom, "-et")) == (
        "-0.5",
        "1",
        "0",
    )
    assert _flag(custom, "--prompt") == "Kennedy:" and _flag(custom, "-mc") == "64"
    assert _flag(argv(), "-mc") == "64"  # None: the profile's
    assert _flag(argv(condition_on_previous_text=False), "-mc") == "0"
    # -mc 0 would drop the prompt too: the prompt wins, and the report says so
    assert _flag(argv(condition_on_previous_text=False, prompt="Kennedy:"), "-mc") == "-1"
    none = Fallback(
        temperatures=(0.0,),
        compression_ratio_threshold=None,
        logprob_threshold=None,
        no_speech_threshold=None,
    )
    off = argv(fallback=none)
    assert "-nf" in off and _flag(off, "-lpt") == "-inf" and "-tpi" not in off
    with pytest.raises(UsageError, match="1 to 8 decoders"):
        argv(fallback=Fallback(best_of=9))


def test_flags_whisper_cpp_cannot_honour_are_reported(whisper_cli):
    uneven = Fallback(temperatures=(0.0, 0.5))
    run = _backend().transcribe(
        load_audio(SAMPLE),
        DecodeRequest(
            beam_size=1, fallback=uneven, prompt="Kennedy:", condition_on_previous_text=False
        ),
    )
    assert wer(SAMPLE_TEXT, "".join(s.text for s in run.segments)) <= 0.1
    notes = " | ".join(run.report.not_applicable)
    assert "temperatures 0, 0.5" in notes and "0, 0.5, 1" in notes
    assert "no compression-ratio test" in notes and "-mc 0 drops the prompt" in notes
    assert run.report.settings["text context (-mc)"] == "-1"


def test_one_temperature_and_no_thresholds_still_transcribe_jfk(whisper_cli):
    none = Fallback(
        temperatures=(0.0,),
        compression_ratio_threshold=None,
        logprob_threshold=None,
        no_speech_threshold=None,
    )
    # Greedy: the fallback flags are the claim, not the search.
    run = _backend().transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1, fallback=none))
    assert wer(SAMPLE_TEXT, "".join(s.text for s in run.segments)) <= 0.1
    settings = run.report.settings
    assert settings["temperature fallback"] == none.describe() == "0.0 only (no retry)"
    assert settings["fallback flags"] == "-tp 0 -nf -et 0 -lpt -inf -nth 1 -bo 5"


# -- language -------------------------------------------------------------------------------------


def test_english_only_model_reports_english_without_a_probability(whisper_cli):
    _, run = _transcribed(SAMPLE, word_timestamps=False)
    assert (run.language, run.language_probability) == ("en", None)


@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="the base extra is not installed")
@pytest.mark.slow
def test_multilingual_model_reports_the_detected_language_and_its_probability(whisper_cli):
    from kvscribe.runner import load_backend

    backend, _ = load_backend(_Choice(model="base"))
    run = backend.transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1, word_timestamps=True))
    segments = list(run.segments)
    assert run.language == "en" and 0.5 < run.language_probability <= 1.0
    assert run.report.settings["word timestamps"].startswith("DTW, heads of base")
    _check_words(segments)
    assert any("multilingual" in note for note in run.report.not_applicable)
    given = backend.transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1, language="en"))
    list(given.segments)
    assert (given.language, given.language_probability) == ("en", None)
