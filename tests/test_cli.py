"""The installed `kvscribe` command, run for real on real audio with the embedded model."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import srt
import webvtt

from kvscribe.errors import ExitCode
from kvscribe.machine import hardware
from tests.conftest import CARDS, CARDS_TEXT, EVAL_DIR, KVSCRIBE, SAMPLE, SAMPLE_TEXT, run_cli, wer

pytestmark = [pytest.mark.model]

HAS_CUDA = hardware.detect().has_cuda
# CARDS (tests/conftest.py) for runs whose claim is plumbing, not the transcript.
# A second real short clip ("seven of clubs"), re-encoded where a test wants other formats.
OTHER_CLIP = EVAL_DIR / "ps_cards_003.wav"

BAD_INPUTS = [
    ("missing", ExitCode.INPUT_NOT_FOUND, "no such file"),
    ("empty_dir", ExitCode.INPUT_NOT_FOUND, "folder holds no audio"),
    ("not_audio", ExitCode.AUDIO_UNDECODABLE, "not an audio"),
    ("truncated_wav", ExitCode.AUDIO_UNDECODABLE, "incomplete"),
    ("corrupt_flac", ExitCode.AUDIO_UNDECODABLE, "incomplete"),
    ("empty", ExitCode.AUDIO_UNDECODABLE, "empty file"),
    ("zero_samples", ExitCode.AUDIO_UNDECODABLE, "no audio samples"),
]


@pytest.fixture(scope="module")
def other_clip_encoded(tmp_path_factory) -> dict[str, Path]:
    """OTHER_CLIP as FLAC (16 kHz) and MP3 (44.1 kHz), as the sample's derived files are."""
    from kvscribe.audio import load_audio
    from tests import media

    folder = tmp_path_factory.mktemp("other_clip")
    return media.encoded(load_audio(OTHER_CLIP), folder, "other", ("flac", "mp3"))


@pytest.fixture(scope="module")
def jfk_run():
    return run_cli(SAMPLE)


def test_jfk_transcript_on_stdout_stats_on_stderr(jfk_run):
    assert jfk_run.code == 0, jfk_run.stderr
    lines = jfk_run.stdout.splitlines()
    assert lines and all(line.startswith("[00:") and "-->" in line for line in lines)
    text = " ".join(line.split("]  ", 1)[1] for line in lines)
    assert wer(SAMPLE_TEXT, text) <= 0.1
    for figure in ("real-time factor", "peak RSS", "cross-attn KV", "tokens decoded", "tiny.en"):
        assert figure in jfk_run.stderr
    assert "Traceback" not in jfk_run.stderr


@pytest.mark.slow
def test_sampled_text_is_the_same_run_after_run():
    """At temperature 1.0 every token is drawn at random: two processes write the same
    text because the engine's generator is seeded (unseeded, three runs of this gave three
    different texts, so any two differed). Each process seeds its own engine afresh, so a
    third run repeats the second's case."""
    texts = []
    for _ in range(2):
        result = run_cli(SAMPLE, "--temperature", "1.0", "--beam-size", "1", "-q", "-f", "txt")
        assert result.code == 0, result.stderr
        texts.append(result.stdout)
    assert texts[0].strip() and texts[0] == texts[1]


def test_all_formats_to_a_folder(tmp_path):
    out = tmp_path / "out"
    result = run_cli(SAMPLE, "-f", "all", "-o", out, "--quiet")
    assert result.code == 0, result.stderr
    assert visible(out) == [f"jfk.{f}" for f in ("json", "srt", "tsv", "txt", "vtt")]
    cues = list(srt.parse((out / "jfk.srt").read_text()))
    assert cues and cues[-1].end.total_seconds() <= 11.0
    captions = webvtt.read(str(out / "jfk.vtt"))
    assert len(captions) == len(cues)
    document = json.loads((out / "jfk.json").read_text())
    assert all({"start", "end", "text"} <= set(s) for s in document["segments"])
    assert wer(SAMPLE_TEXT, document["text"]) <= 0.1
    assert result.stdout == "" and result.stderr == ""  # --quiet with -o: silent


@pytest.mark.slow
def test_repeated_and_comma_separated_formats_add_up(tmp_path):
    """`-f json -f srt,vtt` writes all three (a repeated flag once kept only the last)."""
    out = tmp_path / "out"
    result = run_cli(CARDS, "-f", "json", "-f", "srt,vtt", "-o", out, "--quiet")
    assert result.code == 0, result.stderr
    assert visible(out) == [f"{CARDS.stem}.{f}" for f in ("json", "srt", "vtt")]


@pytest.fixture(scope="module")
def clip_srt_run():
    """The short clip as SubRip on stdout: the run the two tests below read."""
    return run_cli(CARDS, "-f", "srt", "-q")


def test_one_format_without_a_folder_goes_to_stdout(clip_srt_run):
    assert clip_srt_run.code == 0
    assert wer(CARDS_TEXT, " ".join(c.content for c in srt.parse(clip_srt_run.stdout))) <= 0.1


def test_a_batched_run_says_where_its_time_went(tmp_path, long_form_two_chunks):
    """Time by stage and cores busy (docs/stats.md): the stages are parts of the transcribe
    time, each took some, and the CPU seconds fit the cores the run had."""
    path = tmp_path / "stats.json"
    result = run_cli(long_form_two_chunks, "--stats-json", path, "-f", "txt")
    assert result.code == 0, result.stderr
    stats = json.loads(path.read_text())
    stages, settings = stats["stage_seconds"], stats["settings"]
    # Replicas that encode their own rows on onnxruntime compute each row's log-mel there,
    # inside `encoder` (docs/stats.md): a run given 2 threads, as `-n 0` on 2 cores is.
    spread = "replicas" in settings.get("engine threads", "")
    spread = spread and settings["encoder"].startswith("onnxruntime")
    features = [] if spread else ["features"]
    assert list(stages) == ["speech chunks", *features, "encoder", "decoder", "alignment"]
    # The file's speech was scanned while the model loaded (kvscribe/voice/ahead.py): its
    # stage is left only the cuts, and a note gives the scan's own time.
    assert all(seconds > 0 for stage, seconds in stages.items() if stage != "speech chunks")
    assert any("scanned while the model loaded" in note for note in stats["notes"])
    assert sum(stages.values()) <= stats["transcribe_seconds"] * 1.01
    busy = stats["cpu_seconds"] / (stats["wall_seconds"] * stats["cores"])
    # At most all the cores (docs/stats.md): a run told one core may use a second briefly
    # (the scan ahead of the model's load runs on every core).
    assert 0 < stats["cores_busy"] == pytest.approx(min(busy, 1.0), abs=0.002) and busy <= 1.05
    assert "time by stage" in result.stderr and "cores busy" in result.stderr


def test_stats_json_matches_the_run(tmp_path, jfk_run):
    path = tmp_path / "stats.json"
    # The first run on a machine times both encoders while the model loads
    # (backends/ctranslate2/encoder.py), and their buffers would be in the start figure:
    # jfk_run (the same model, profile and threads; the beam size is not in the timing's key)
    # is that first run, and this one reads its timing from the cache.
    assert jfk_run.code == 0, jfk_run.stderr
    result = run_cli(SAMPLE, "--stats-json", path, "--beam-size", "1")
    assert result.code == 0
    stats = json.loads(path.read_text())
    assert stats["audio_seconds"] == pytest.approx(11.0)
    assert stats["files_done"] == 1 and stats["files_failed"] == 0
    assert stats["settings"]["beam size"] == "1"
    # tiny.en, one copy: 18.4 MB in fp32 activations (int8 on CPU), 9.2 MB in fp16 (auto picks
    # a GPU profile, float16 or int8_float16, where there is CUDA).
    value_bytes = 2 if HAS_CUDA else 4
    assert stats["device"] == ("cuda" if HAS_CUDA else "cpu")
    assert stats["kv_cross_bytes"] == 2 * 4 * 1500 * 384 * value_bytes
    assert stats["wall_seconds"] >= stats["transcribe_seconds"] + stats["load_seconds"] * 0.99
    # Both figures are rounded (RTF to 4 places, wall to 3): the bound is those two roundings.
    rounding = 0.5e-4 + 0.5e-3 / 11.0
    assert abs(stats["real_time_factor"] - stats["wall_seconds"] / 11.0) <= rounding * 1.01
    assert stats["tokens_decoded"] > 20 and stats["peak_rss_bytes"] > 50e6
    assert stats["kv_estimated"] is True and stats["kv_cross_bytes"] > stats["kv_self_peak_bytes"]
    # RSS over the run: start (before the scan), after the first window, end; never above
    # the peak, and the engine's buffers arrive with the first window.
    start, warm, end = (stats[f"rss_{k}_bytes"] for k in ("start", "after_warmup", "end"))
    assert 0 < start < warm and max(start, warm, end) <= stats["peak_rss_bytes"]
    samples = stats["files"][0]["memory_samples"]
    assert samples[0] == [0.0, start] and samples[-1] == [11.0, end]


@pytest.fixture()
def bad_inputs(derived, tmp_path):
    (tmp_path / "empty_dir").mkdir()
    return {
        "missing": tmp_path / "missing.wav",
        "empty_dir": tmp_path / "empty_dir",
        **{k: derived[k] for k, _, _ in BAD_INPUTS if k in derived},
    }


@pytest.mark.parametrize(("kind", "code", "words"), BAD_INPUTS)
def test_bad_input_one_line_error_exit_code_no_output(bad_inputs, tmp_path, kind, code, words):
    out = tmp_path / "out"
    result = run_cli(bad_inputs[kind], "-o", out)
    assert result.code == code
    assert result.stderr.count("\n") == 1 and words in result.stderr
    assert str(bad_inputs[kind]) in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not out.exists() or visible(out) == []  # at most the hidden manifest


@pytest.mark.slow
def test_a_bad_file_does_not_stop_the_others(bad_inputs, other_clip_encoded, tmp_path):
    out = tmp_path / "out"
    speech = shutil.copy(other_clip_encoded["flac"], tmp_path / "speech.flac")
    result = run_cli(
        bad_inputs["not_audio"], CARDS, bad_inputs["missing"], speech, "-o", out, "-f", "txt"
    )
    assert result.code == ExitCode.SOME_FAILED
    assert sorted(p.name for p in out.rglob("*.txt")) == [f"{CARDS.stem}.txt", "speech.txt"]
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 2
    assert (
        sum("notes.wav" in e for e in errors) == 1 and sum("missing.wav" in e for e in errors) == 1
    )


@pytest.mark.slow
def test_same_name_in_two_folders_mirrors_both(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    twin = shutil.copy(CARDS, other / CARDS.name)
    # --jobs 1: the outputs' names are planned before any file is decoded, here as with workers.
    result = run_cli(CARDS, twin, "-o", tmp_path / "out", "-f", "txt", "-q", "--jobs", "1")
    assert result.code == 0, result.stderr
    written = sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*.txt"))
    assert len(written) == 2 and written[0] != written[1]
    assert all(p.name == f"{CARDS.stem}.txt" for p in written)


@pytest.mark.slow
def test_a_folder_is_expanded_to_its_audio_files(other_clip_encoded, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(CARDS, folder / "a.wav")
    shutil.copy(other_clip_encoded["mp3"], folder / "b.mp3")
    (folder / "notes.txt").write_text("not audio, and not picked up")
    # --jobs 1: the folder is expanded before any file is decoded, here as with workers.
    result = run_cli(folder, "-o", tmp_path / "out", "-f", "txt", "-q", "--jobs", "1")
    assert result.code == 0, result.stderr
    assert visible(tmp_path / "out") == ["a.txt", "b.txt"]


def visible(folder: Path) -> list[str]:
    """A folder's entries without hidden ones (a batch keeps its manifest in `.kvscribe/`)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--backend", "nope"], ExitCode.USAGE, "unknown backend"),
        (["--profile", "nope"], ExitCode.USAGE, "unknown profile"),
        (["--model", "nope"], ExitCode.MODEL_NOT_FOUND, "unknown model name"),
        (["--model", "small"], ExitCode.MODEL_NOT_FOUND, "HF_HUB_OFFLINE"),
        (["--language", "de"], ExitCode.USAGE, "English-only"),
        (["--task", "translate"], ExitCode.USAGE, "cannot translate"),
        (["-f", "docx"], ExitCode.USAGE, "unknown format"),
        (["-f", "txt,srt"], ExitCode.USAGE, "add --output-dir"),
        (["--beam-size", "0"], ExitCode.USAGE, "between 1 and 16"),
        (["--device", "mps"], ExitCode.USAGE, "backend ctranslate2 cannot run on mps"),
        (["--jobs", "2"], ExitCode.USAGE, "--jobs: only applies to runs that write into a folder"),
        (["--json"], ExitCode.USAGE, "add --output-dir"),
        (["--compute-type", "bogus"], ExitCode.USAGE, "--compute-type: the ctranslate2 backend"),
        (["--language", "klingon"], ExitCode.USAGE, "unknown language code 'klingon'"),
        (["-o", "-"], ExitCode.USAGE, "goes to stdout"),
        (["--vad-pad", "0.2"], ExitCode.USAGE, "--vad-pad: tunes --vad-filter, which is off"),
    ],
)
def test_bad_options(args, code, words):
    result = run_cli(SAMPLE, *args)
    assert result.code == code, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr
    if code != ExitCode.USAGE or "unknown format" in words:
        assert result.stderr.count("\n") == 1


def test_an_output_folder_named_like_a_file_is_refused_unless_it_is_there(tmp_path):
    talk = tmp_path / "talk.txt"
    refused = run_cli(SAMPLE, "-o", talk)
    assert refused.code == ExitCode.USAGE and refused.stderr.count("\n") == 1
    assert "--output-dir" in refused.stderr and f"-f txt > {talk}" in refused.stderr
    assert not talk.exists()
    talk.mkdir()  # a folder of that name that is already there is a folder
    written = run_cli(CARDS, "-o", talk, "-f", "txt", "-q")
    assert written.code == 0, written.stderr
    assert visible(talk) == [f"{CARDS.stem}.txt"]


def test_outputs_that_cannot_be_written_are_one_line_errors(tmp_path):
    """A file where a folder must be (-o under a file, --stats-json under one) is refused
    before the model loads; a folder no one may make (under /proc: what only the write
    finds, even for root) is said in one line, not as an internal error."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for args in (["-o", blocker / "sub"], ["--stats-json", blocker / "stats.json", "-q"]):
        result = run_cli(SAMPLE, *args)
        assert result.code == ExitCode.USAGE, result.stderr
        assert f"cannot write under {blocker}: it is a file" in result.stderr
        assert result.stderr.count("\n") == 1 and not result.stdout
    if Path("/proc/self").is_dir():
        result = run_cli(CARDS, "-o", "/proc/kvscribe-test", "-q")
        assert result.code == ExitCode.SOME_FAILED, result.stderr
        assert "/proc/kvscribe-test: cannot write here" in result.stderr
        assert "internal error" not in result.stderr and result.stderr.count("\n") == 1


def test_several_files_as_json_on_stdout_are_json_lines(tmp_path):
    """Pretty documents run together are not JSON; one compact document a line is."""
    import json

    for clip in (CARDS, EVAL_DIR / "ps_cards_003.wav"):
        (tmp_path / clip.name).write_bytes(clip.read_bytes())
    result = run_cli(tmp_path, "-f", "json", "-q")
    assert result.code == 0, result.stderr
    documents = [json.loads(line) for line in result.stdout.splitlines()]
    sources = sorted(Path(d["kvscribe"]["source"]).name for d in documents)
    assert sources == [CARDS.name, "ps_cards_003.wav"]
    ours = next(d["text"] for d in documents if CARDS.stem in d["kvscribe"]["source"])
    assert wer(CARDS_TEXT, ours) < 0.1


def test_subtitles_end_by_the_end_of_the_audio(clip_srt_run):
    """Whisper's last timestamp overshoots a short clip's end (this 1.1 s clip's segment
    ended at 2.0 s): every cue ends by the audio's end."""
    from kvscribe.audio import SAMPLE_RATE, load_audio

    seconds = load_audio(CARDS).size / SAMPLE_RATE
    assert clip_srt_run.code == 0, clip_srt_run.stderr
    cues = list(srt.parse(clip_srt_run.stdout))
    assert cues and all(c.end.total_seconds() <= seconds + 0.0005 for c in cues), cues
    assert cues[-1].end.total_seconds() > seconds - 0.5  # the last words still reach it


def test_gpu_profile_runs_on_cuda_or_says_there_is_none():
    result = run_cli(SAMPLE, "--profile", "gpu")
    if HAS_CUDA:
        assert result.code == 0, result.stderr
        assert "tiny.en / cuda" in result.stderr and "float16" in result.stderr
    else:
        assert result.code == ExitCode.BACKEND_UNAVAILABLE, result.stderr
        assert "no CUDA device" in result.stderr and result.stderr.count("\n") == 1


def test_an_empty_files_from_list_is_nothing_to_do(tmp_path):
    """`find ... | kvscribe --files-from -` on a day find finds nothing: it was a usage error
    (exit 2), and a nightly script reported a failure."""
    argv = [KVSCRIBE, "--files-from", "-", "-o", tmp_path / "out"]
    argv += ["--stats-json", tmp_path / "stats.json"]
    done = subprocess.run(argv, input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stderr == "kvscribe: no input files listed in stdin: nothing to do\n"
    assert json.loads((tmp_path / "stats.json").read_text())["files_done"] == 0
