"""openai-whisper's own writers read kvscribe's JSON unchanged and write the same subtitles.

openai-whisper is installed without its dependencies (they pull torch, numba,
triton): `pip install --no-deps openai-whisper`. Only its `whisper/utils.py` (the
writers, standard library only) is loaded, by file path, since `import whisper`
needs torch. The transcript is a real one: faster-whisper's word timestamps for
two JFK readings with 4 s pauses around them, so cues cross segments, windows and
a pause long enough for openai-whisper's long-pause cue break.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
import srt

from kvscribe.types import Segment, Transcript, Word
from kvscribe.writers import RENDERERS, WriterOptions, render_srt
from tests.conftest import SAMPLE, SAMPLE_TEXT, wer

INSTALL = ".venv/bin/pip install --no-deps openai-whisper==20250625"

OPTION_SETS = [
    {},
    {"highlight_words": True},
    {"max_line_width": 42, "highlight_words": True},
    {"max_line_width": 42, "max_line_count": 2},
    {"max_line_width": 42, "max_line_count": 2, "highlight_words": True},
    {"max_line_width": 20, "max_line_count": 1},
    {"max_words_per_line": 4},
    {"max_words_per_line": 3, "max_line_width": 16, "highlight_words": True},
]


def _load_openai_whisper_utils() -> ModuleType:
    try:
        importlib.metadata.version("openai-whisper")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"openai-whisper is not installed; install it with: {INSTALL}")
    package = importlib.util.find_spec("whisper")
    assert package and package.submodule_search_locations, "openai-whisper has no whisper/"
    path = Path(next(iter(package.submodule_search_locations))) / "utils.py"
    spec = importlib.util.spec_from_file_location("openai_whisper_utils", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def whisper_utils() -> ModuleType:
    return _load_openai_whisper_utils()


def _word(w) -> Word:
    return Word(float(w.start), float(w.end), w.word, float(w.probability))


def _segment(index: int, s) -> Segment:
    return Segment(
        id=index,
        start=float(s.start),
        end=float(s.end),
        text=s.text,
        tokens=tuple(s.tokens),
        avg_logprob=s.avg_logprob,
        no_speech_prob=s.no_speech_prob,
        seek=s.seek,
        temperature=s.temperature,
        compression_ratio=s.compression_ratio,
        words=tuple(_word(w) for w in s.words or ()),
    )


@pytest.fixture(scope="module")
def transcript(tmp_path_factory) -> Transcript:
    """faster-whisper (the ctranslate2 backend's engine) with word timestamps, tiny.en."""
    from faster_whisper import WhisperModel

    from kvscribe import models, registry
    from tests import media

    clip = tmp_path_factory.mktemp("paused") / "jfk_twice.wav"
    media.paused_clip([SAMPLE, SAMPLE], 4.0, clip)
    model_dir = models.resolve(None, registry.get("ctranslate2").capabilities.model_formats).path
    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=2)
    raw, info = model.transcribe(str(clip), beam_size=5, word_timestamps=True)
    segments = [_segment(i, s) for i, s in enumerate(raw)]
    return Transcript(str(clip), info.language, info.duration, segments, info.language_probability)


def _with_gaps(transcript: Transcript) -> Transcript:
    """Each word ends 50 ms early: highlighted subtitles then need the gap cues between words."""

    def shortened(w: Word) -> Word:
        return replace(w, end=max(w.start, w.end - 0.05))

    segments = [replace(s, words=tuple(map(shortened, s.words))) for s in transcript.segments]
    return replace(transcript, segments=segments)


def _openai_output(utils, fmt: str, document: dict, options: dict, folder: Path) -> str:
    folder.mkdir(exist_ok=True)
    writer = utils.get_writer(fmt, str(folder))
    writer(document, str(folder / "talk.wav"), dict(options))  # a copy: writers must not mutate
    return (folder / f"talk.{fmt}").read_text(encoding="utf-8")


def test_the_transcript_is_real_and_has_words(transcript):
    assert wer(SAMPLE_TEXT + " " + SAMPLE_TEXT, transcript.text) <= 0.15
    assert len(transcript.segments) >= 2
    assert all(s.words for s in transcript.segments)


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("fmt", ["srt", "vtt"])
@pytest.mark.parametrize("gaps", [False, True], ids=["as-decoded", "with-gaps"])
def test_openai_whisper_writes_the_same_subtitles_from_kvscribe_json(
    whisper_utils, transcript, tmp_path, fmt, options, gaps
):
    if gaps:
        transcript = _with_gaps(transcript)
    document = json.loads(RENDERERS["json"](transcript))
    theirs = _openai_output(whisper_utils, fmt, document, options, tmp_path / "openai")
    ours = RENDERERS[fmt](transcript, WriterOptions(**options))
    assert ours == theirs


@pytest.mark.parametrize("fmt", ["srt", "vtt", "txt", "tsv"])
def test_without_words_both_write_segment_cues(whisper_utils, transcript, tmp_path, fmt):
    plain = replace(transcript, segments=[replace(s, words=()) for s in transcript.segments])
    document = json.loads(RENDERERS["json"](plain))
    assert all("words" not in s for s in document["segments"])
    theirs = _openai_output(whisper_utils, fmt, document, {}, tmp_path / "openai")
    assert RENDERERS[fmt](plain) == theirs


@pytest.mark.parametrize("fmt", ["txt", "tsv", "json"])
def test_openai_whisper_reads_every_format_from_kvscribe_json(
    whisper_utils, transcript, tmp_path, fmt
):
    document = json.loads(RENDERERS["json"](transcript))
    options = {"highlight_words": True, "max_line_width": 42, "max_line_count": 2}
    theirs = _openai_output(whisper_utils, fmt, document, options, tmp_path / "openai")
    if fmt == "json":
        assert json.loads(theirs) == document
    else:  # segment text, as kvscribe writes it
        assert theirs == RENDERERS[fmt](transcript)


def test_highlighted_srt_at_42_columns_parses_with_the_srt_package(transcript):
    text = render_srt(transcript, WriterOptions(highlight_words=True, max_line_width=42))
    cues = list(srt.parse(text))
    words = [w for s in transcript.segments for w in s.words]
    highlighted = [c for c in cues if "<u>" in c.content]
    assert len(highlighted) == len(words)
    for cue, word in zip(highlighted, words, strict=True):
        assert re.findall(r"<u>(.*?)</u>", cue.content) == [word.word.strip()]
        assert cue.start.total_seconds() == pytest.approx(word.start, abs=0.0015)
    lines = [line for c in cues for line in re.sub(r"</?u>", "", c.content).splitlines()]
    assert lines and max(map(len, lines)) <= 42
