"""Whether a live decode could skip re-reading its context: what each way of giving Whisper
the speech before an utterance costs in time and in words.

    .venv/bin/python benchmarks/live_context.py

Live mode decodes an utterance with up to 8 s of the speech before it in the buffer, and
beam search reads those seconds again at every decode (docs/live.md, "How it works"). Two
ways to spare that, and the two they are measured against:
- "context decoded again": live mode's way.
- "context text forced as decoder prefix": the committed words of the context are forced
  after the start tokens (faster-whisper's `prefix`), so the decoder only continues them.
  With timestamp tokens the decoder closed the prefix's segment and stopped, so these
  decodes run without them (word times come from alignment, prefix included).
- "context text as previous-text prompt": the committed words go before the start tokens
  (`initial_prompt`) and the audio is the same buffer: Whisper often skips speech that the
  prompt already holds.
- "no context": the utterance alone.

Each utterance of the realform English clips (silero VAD, cut at pauses of 0.7 s, padded
0.2 s each side) is decoded once per way, in order, in this process (faster-whisper's
`transcribe` on the embedded tiny.en, int8, 2 threads, beam 5, live mode's token bound
and word timestamps). The context is every earlier utterance that starts within 8 s of
this one's onset; its text is what the same way committed for them. The words kept of a
decode are those live mode would commit at the utterance's end (`LocalAgreement.after`:
words timed before the onset are skipped, as are context words repeated just after it).
WER pooled per clip; decode seconds summed (one pass: a guide, not a timing bar).
Writes benchmarks/results/live_context.{json,md}.
"""

from __future__ import annotations

import time
from pathlib import Path

import results_file
from encoder_window import PAD, REALFORM, speech_spans

from kvscribe import models
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.bench.wer import pooled_wer
from kvscribe.live.agreement import Hypothesis, LocalAgreement
from kvscribe.live.session import _TOKENS_BASE, _TOKENS_PER_SECOND

EVAL = Path(__file__).resolve().parent.parent / "eval"
CONTEXT = 8.0  # seconds before an onset, live mode's default --context
WAYS = (
    "context decoded again",
    "context text forced as decoder prefix",
    "context text as previous-text prompt",
    "no context",
)


def load_engine():
    from faster_whisper import WhisperModel

    model = models.resolve(None, ("ctranslate2",))
    return WhisperModel(str(model.path), device="cpu", compute_type="int8", cpu_threads=2)


def decode(engine, samples, way: str, context_text: str):
    """One decode of `samples` the given way: (segments, seconds)."""
    options = {}
    if context_text and way == WAYS[1]:
        options = {"prefix": context_text, "without_timestamps": True}
    elif context_text and way == WAYS[2]:
        options = {"initial_prompt": context_text}
    bound = int(samples.size / SAMPLE_RATE * _TOKENS_PER_SECOND) + _TOKENS_BASE
    started = time.perf_counter()
    segments, _ = engine.transcribe(
        samples,
        language="en",
        beam_size=5,
        condition_on_previous_text=False,
        vad_filter=False,
        word_timestamps=True,
        max_new_tokens=bound,
        **options,
    )
    segments = list(segments)
    return segments, time.perf_counter() - started


def transcribe_clip(engine, samples, way: str) -> tuple[str, float, int]:
    """The clip's committed text read utterance by utterance, decode seconds, decodes."""
    spans = speech_spans(samples)
    committed: list[list[str]] = []
    seconds = 0.0
    for index, (first, end) in enumerate(spans):
        onset = first + PAD
        reach = onset - CONTEXT * SAMPLE_RATE
        earlier = [k for k in range(index) if spans[k][0] >= reach and way != WAYS[3]]
        start = spans[earlier[0]][0] if earlier else first
        context_words = [word for k in earlier for word in committed[k]]
        segments, spent = decode(engine, samples[start:end], way, " ".join(context_words))
        seconds += spent
        heard = (onset - start) / SAMPLE_RATE if earlier else 0.0
        agreement = LocalAgreement.after(heard, context_words)
        committed.append(agreement.finish(Hypothesis.from_decode(segments)))
    return " ".join(word for words in committed for word in words), seconds, len(spans)


def main() -> None:
    engine = load_engine()
    rows = []
    for name in REALFORM:
        path = EVAL / "realform" / f"{name}.wav"
        samples, reference = load_audio(path), path.with_suffix(".txt").read_text("utf-8")
        for way in WAYS:
            text, seconds, decodes = transcribe_clip(engine, samples, way)
            rows.append(
                {
                    "clip": name,
                    "way": way,
                    "wer": pooled_wer([(reference, text)]),
                    "decode_seconds": seconds,
                    "decodes": decodes,
                    "text": text,
                }
            )
            print(f"{name} | {way}: WER {rows[-1]['wer']:.3f}, {seconds:.1f} s / {decodes}")
    table = _table(rows)
    print("\n" + table)
    meta = {"model": "tiny.en", "device": "cpu", "engine": "faster-whisper, int8, 2 threads"}
    results_file.write("live_context", meta, rows, table)


def _table(rows: list[dict]) -> str:
    return (
        "Each utterance decoded once per way, in order, in this process (faster-whisper, "
        "tiny.en int8, 2 threads, beam 5, word timestamps); one pass.\n\n"
        + results_file.grid(
            rows,
            across="clip",
            down="way",
            corner="context",
            head=lambda row: f"{row['clip']} ({row['decodes']} utterances): WER, decode s",
            cell=lambda row: f"{row['wer']:.3f}, {row['decode_seconds']:.1f}",
        )
    )


if __name__ == "__main__":
    main()
