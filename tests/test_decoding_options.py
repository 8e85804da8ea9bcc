"""faster-whisper's and openai-whisper's optional decoding flags through the real CLI:
--max-new-tokens, --suppress-tokens, --hotwords, --hallucination-silence-threshold and
--clip-timestamps, on each backend that honours them, and the "not applicable" row the
runner writes where a backend cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscribe.contract import DecodeRequest, not_honoured
from kvscribe.controls import suppressed_ids
from kvscribe.errors import ExitCode, UsageError
from kvscribe.option_values import parse_clips
from tests.conftest import ROOT, SAMPLE, SAMPLE_TEXT, run_cli

pytestmark = [pytest.mark.model]

STEPPED = ("ctranslate2", "transformers")  # the engines whose decoding kvscribe drives
JOINED = ROOT / "kvscribe" / "data" / "joined_real.flac"  # 50 s: two speech chunks


def _run(tmp_path: Path, backend: str, *flags: str, audio: Path = SAMPLE) -> dict:
    """One real run into a folder: its JSON transcript, with the stats report beside it."""
    out, stats = tmp_path / "out", tmp_path / "stats.json"
    result = run_cli(audio, "-b", backend, "-f", "json", "-o", out, "--stats-json", stats, *flags)
    assert result.code == 0, result.stderr
    document = json.loads((out / f"{audio.stem}.json").read_text())
    document["stats"] = json.loads(stats.read_text())
    return document


def _words(document: dict) -> list[str]:
    """The transcript's words, lower case, without punctuation (a cut decode may end a
    word where the whole one put a comma)."""
    text = " ".join(s["text"] for s in document["segments"])
    return [word.strip(",.?!").lower() for word in text.split()]


def _unhonoured(document: dict) -> set[str]:
    """The flags the stats say were not honoured."""
    return {row.split(":")[0] for row in document["stats"]["not_applicable"]}


def _tokens(document: dict) -> list[int]:
    return [token for segment in document["segments"] for token in segment["tokens"]]


# -- the values --------------------------------------------------------------------------------


def test_values_parse_as_the_other_tools_write_them():
    assert suppressed_ids("-1") == (-1,) and suppressed_ids("-1,50363") == (-1, 50363)
    assert parse_clips("0,10,30") == ((0.0, 10.0), (30.0, None))
    assert parse_clips("5.5,8") == ((5.5, 8.0),)
    for bad in ("", "x", "-2", "1,,2"):
        with pytest.raises(UsageError, match="token ids"):
            suppressed_ids(bad)
    for bad in ("10,5", "x", "-1,4", "0,5,5"):
        with pytest.raises(UsageError, match="start,end pairs"):
            parse_clips(bad)


def test_not_honoured_names_each_flag_set_away_from_its_default():
    request = DecodeRequest(max_new_tokens=5, suppress_tokens=(-1, 7), hotwords="Kennedy")
    rows = not_honoured(request, frozenset({"hotwords"}), "whispercpp")
    assert [row.split(":")[0] for row in rows] == ["--max-new-tokens", "--suppress-tokens"]
    assert all("whispercpp backend cannot honour it" in row for row in rows)
    assert not_honoured(DecodeRequest(), frozenset(), "whispercpp") == []


def test_whisper_cpp_words_its_fallback_rule_as_every_backend():
    """One "temperature fallback" row in every backend's stats (Fallback.describe); whisper.cpp's
    names the entropy test it runs instead of the compression ratio, and the temperatures it
    steps through, with its flags in a row of their own."""
    from kvscribe.backends.whispercpp.flags import fallback_flags
    from kvscribe.decoding import Fallback

    default = fallback_flags(Fallback()).settings
    assert default["temperature fallback"] == Fallback().describe().replace(
        "compression > 2.4", "entropy < 2.4 (whisper.cpp's repetition test)"
    )
    assert default["fallback flags"] == "-tp 0 -tpi 0.2 -et 2.4 -lpt -1 -nth 0.6 -bo 5"
    uneven = fallback_flags(Fallback(temperatures=(0.0, 0.5, 0.6), best_of=2)).settings
    assert uneven["temperature fallback"].startswith("0.0-1.0 step 0.5, best of 2, entropy")


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--max-new-tokens", "300"], "--max-new-tokens"),
        (["--suppress-tokens", "a,b"], "--suppress-tokens"),
        (["--clip-timestamps", "8,2"], "--clip-timestamps"),
        (["--hotwords", " "], "--hotwords"),
        (["--hallucination-silence-threshold", "2"], "--word-timestamps"),
    ],
)
def test_bad_values_are_one_line_usage_errors(flags, named):
    result = run_cli(SAMPLE, *flags)
    assert result.code == ExitCode.USAGE, result.stderr
    assert named in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- what each does, on the engines that honour it ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", STEPPED)
def test_max_new_tokens_cuts_each_window_short(backend, tmp_path):
    """The sample is one window: four tokens of it at most, the first words of what the
    whole decode gives (the sample's text: the backends' own tests)."""
    cut = _run(tmp_path, backend, "--max-new-tokens", "4")
    whole = [word.strip(",.").lower() for word in SAMPLE_TEXT.split()]
    assert 1 <= len(_words(cut)) <= 4 and _words(cut) == whole[: len(_words(cut))]
    assert "--max-new-tokens" not in _unhonoured(cut)


@pytest.mark.slow
@pytest.mark.parametrize("backend", STEPPED)
def test_a_suppressed_token_is_never_decoded(backend, tmp_path):
    """ " country", which the sample says twice (every backend's own test decodes it),
    never comes out once suppressed; the rest is still transcribed."""
    from tokenizers import Tokenizer

    from kvscribe import models

    path = models.resolve("tiny.en", ("ctranslate2",)).path / "tokenizer.json"
    (country,) = Tokenizer.from_file(str(path)).encode(" country", add_special_tokens=False).ids
    # Greedy: the suppression is the claim, not the search.
    suppressed = _run(tmp_path, backend, "--suppress-tokens", f"-1,{country}", "--beam-size", "1")
    assert country not in _tokens(suppressed) and len(_words(suppressed)) > 15


@pytest.mark.transformers
def test_hotwords_reach_the_prompt_as_faster_whisper_builds_it():
    """Both stepped engines put the hotwords where faster-whisper's transcribe() does:
    after <|startofprev|>, before the previous text and the start sequence."""
    from kvscribe.adapters import faster_whisper as adapter
    from kvscribe.backends.ctranslate2 import batched as ct2_batched
    from kvscribe.backends.ctranslate2.replicas import Replicas
    from tests.loaded import backend

    hotwords = "Kennedy, Americans"
    engine = backend("ctranslate2").engine
    request = DecodeRequest(hotwords=hotwords)
    plan, tokenizer = ct2_batched.setup(engine, "en", request, 5, 8, Replicas(engine, engine, 1))
    expected = adapter.prompt(engine, tokenizer, [], hotwords)
    assert plan.prompt == expected and expected[0] == tokenizer.sot_prev
    words = tokenizer.encode(" " + hotwords)
    assert expected[1 : 1 + len(words)] == words
    pytest.importorskip("torch")
    other = backend("transformers")
    window = other._plan("en", "transcribe", 1, DecodeRequest(hotwords=hotwords))
    # The same tokens up to the start sequence (the transformers backend decodes with
    # timestamps, so it has no <|notimestamps|> at the end).
    assert window.prompt_for([]) == expected[:-1]


@pytest.mark.slow
@pytest.mark.parametrize("backend", STEPPED)
def test_hotwords_keep_the_transcript(backend, tmp_path):
    document = _run(tmp_path, backend, "--hotwords", "Americans, country", "--beam-size", "1")
    assert "americans" in " ".join(_words(document)) and len(_words(document)) > 15


@pytest.mark.slow
def test_hallucination_silence_threshold_on_the_sequential_path_only(tmp_path):
    # Greedy: which path honours the flag is the question, not the search.
    flags = ["--beam-size", "1", "--word-timestamps", "--hallucination-silence-threshold", "2"]
    batched = _run(tmp_path / "batched", "ctranslate2", *flags, "--batch-size", "8", audio=JOINED)
    assert "--hallucination-silence-threshold" in _unhonoured(batched)
    assert "the ctranslate2 backend cannot honour it" in str(batched["stats"]["not_applicable"])
    # What decides is the audio decoded: 20 s of the same file is one window, sequential
    # (clipped, it shares no batch with other files either), honoured, and transcribed.
    sequential = _run(tmp_path / "clipped", "ctranslate2", *flags, "--batch-size", "8",
                      "--clip-timestamps", "0,20", audio=JOINED)  # fmt: skip
    assert "--hallucination-silence-threshold" not in _unhonoured(sequential)
    assert len(_words(sequential)) > 15


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["transformers", "whispercpp"])
def test_a_backend_that_cannot_honour_a_flag_says_so(backend, tmp_path):
    unhonoured = {"--hallucination-silence-threshold": "2"}
    if backend == "whispercpp":
        unhonoured |= {"--max-new-tokens": "50", "--suppress-tokens": "-1,50363", "--hotwords": "x"}
    flags = [part for pair in unhonoured.items() for part in pair]
    document = _run(tmp_path, backend, "--word-timestamps", "--beam-size", "1", *flags)
    assert set(unhonoured) <= _unhonoured(document)
    assert len(_words(document)) > 15  # decoded without them


# -- --clip-timestamps: cut by the runner, so every backend honours it --------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ctranslate2", "transformers", "whispercpp"])
def test_clip_timestamps_decode_only_the_spans_on_the_files_clock(backend, tmp_path):
    head = _run(tmp_path / "head", backend, "--clip-timestamps", "0,3", "--beam-size", "1")
    tail = _run(tmp_path / "tail", backend, "--clip-timestamps", "3.2", "--beam-size", "1")
    head_text, tail_text = " ".join(_words(head)).lower(), " ".join(_words(tail)).lower()
    assert "americans" in head_text and "country" not in head_text
    assert "americans" not in tail_text and tail_text.count("country") == 2
    assert max(s["end"] for s in head["segments"]) <= 3.05
    assert min(s["start"] for s in tail["segments"]) >= 3.15  # the file's clock, not the span's
    assert head["stats"]["settings"]["clip timestamps"].startswith("3.0 of 11.0 s decoded")
