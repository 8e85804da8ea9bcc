"""One input through whisper-cli, a piece at a time (backends/whispercpp/pieces.py): each
piece written to a float WAV, run to its end, its segments moved onto the input's clock.

What one run of the whole input would carry from window to window is carried from piece
to piece: the language detected on the first piece is passed to the others (-l), and when
windows are conditioned on the text before them (-mc not 0) the text so far is passed as
--prompt (whisper.cpp keeps the last tokens of it that -mc allows, as it does within a
run). The engine's figures are kept per piece and merged by the caller once all ran.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvscribe.audio.stream import Samples
from kvscribe.backends.whispercpp import fulljson
from kvscribe.backends.whispercpp.engine_report import retries
from kvscribe.backends.whispercpp.pieces import SAMPLE_RATE, Piece, write_pieces
from kvscribe.backends.whispercpp.plan import Plan, Run, argv
from kvscribe.backends.whispercpp.process import Outcome, execute, timeout_for
from kvscribe.backends.whispercpp.report import EngineFigures, parse_segment_line, parse_stderr
from kvscribe.backends.whispercpp.segments import SegmentMaker
from kvscribe.contract import DecodeRequest, Transcription
from kvscribe.types import Segment

# Previous text handed to the next piece: whisper.cpp keeps at most half its text context
# (224 tokens) of it, a few characters each, so this is more than it can use.
PROMPT_CHARS = 1500
logger = logging.getLogger(__name__)


@dataclass
class Job:
    """What every whisper-cli run of one request shares."""

    base: list[str]  # the binary and its model: ["whisper-cli", "-m", MODEL]
    plan: Plan
    request: DecodeRequest
    kv_types: bool  # this whisper-cli takes -kvs / -kvc
    threads: int
    batch: int
    processors_for: Callable[[int, float], int]  # (batch, seconds) -> -p
    check: Callable[[Outcome], None]  # raises the kvscribe error of a failed run
    vocab: fulljson.Vocabulary
    multilingual: bool


class Session:
    """Runs the pieces of one input; `segments()` yields each piece's segments."""

    def __init__(self, job: Job, run: Transcription):
        self.job = job
        self.run = run
        self.maker = SegmentMaker(job.vocab, job.plan.words)
        self.language = job.request.language or ("auto" if job.multilingual else "en")
        self.figures: list[EngineFigures] = []
        self.peak_rss: int | None = None
        self.retried = 0
        self.processors = 1  # the most any piece ran with
        self.pieces = 0
        self.limit_seconds = 0.0
        self.done = False  # every piece ran: the report can be filled
        self._text = ""  # the end of the text decoded so far (the next piece's prompt)

    def segments(self, audio: Samples, limit: int) -> Iterator[list[Segment]]:
        """Each piece's segments as soon as its run ended; `done` before the last batch."""
        self.limit_seconds = limit / SAMPLE_RATE
        work = tempfile.TemporaryDirectory(prefix="kvscribe-whispercpp-")
        try:
            folder = Path(work.name)
            wav = folder / "audio.wav"
            for piece in write_pieces(audio, wav, limit):
                segments = self._run(piece, wav, folder)
                if piece.last:
                    work.cleanup()
                    self.done = True
                yield segments
        finally:
            work.cleanup()

    def _run(self, piece: Piece, wav: Path, folder: Path) -> list[Segment]:
        job = self.job
        processors = job.processors_for(job.batch, piece.seconds)
        self.processors = max(self.processors, processors)
        out = folder / "result"
        result = out.with_suffix(".json")
        result.unlink(missing_ok=True)  # a run that writes none must not read the last one's
        threads = max(1, job.threads // processors)
        run = Run(wav, out, threads, processors, self.language, self._prompt(piece))
        args = argv(job.base, job.plan, run, job.request, job.kv_types)
        outcome, printed = execute(args, folder / "stderr.txt", timeout_for(piece.seconds))
        logger.debug("%s\n%s", " ".join(args), outcome.stderr)
        job.check(outcome)
        self.pieces += 1
        self.figures.append(parse_stderr(outcome.stderr))
        self.retried += retries(outcome.stderr)
        if outcome.peak_rss_bytes is not None:
            self.peak_rss = max(self.peak_rss or 0, outcome.peak_rss_bytes)
        segments = self._read(result, printed, piece)
        if piece.index == 0:
            self._detected(outcome.stderr)
        return segments

    def _prompt(self, piece: Piece) -> str | None:
        """--prompt for a piece: the request's for the first; after it, with previous-text
        conditioning, the request's and the text decoded so far (its end)."""
        prompt = self.job.request.prompt
        if piece.index == 0 or not self.job.plan.conditions:
            return prompt
        return _tail((prompt or "") + self._text, PROMPT_CHARS)

    def _read(self, result: Path, printed: list[str], piece: Piece) -> list[Segment]:
        """Segments from the full JSON; from stdout's lines (text and times only) in case
        whisper-cli wrote none."""
        if not result.is_file():
            lines = [parsed for line in printed if (parsed := parse_segment_line(line))]
            shift = piece.start / SAMPLE_RATE
            first = self.maker.made
            self.maker.made += len(lines)
            return [
                Segment(first + i, round(start + shift, 2), round(end + shift, 2), text)
                for i, (start, end, text) in enumerate(lines)
            ]
        full = fulljson.read(result)
        if piece.index == 0:
            self.run.language = full.language or self.run.language
        self.run.report.tokens += full.decoded_tokens
        self._text = _tail(self._text + "".join(s.text for s in full.segments), PROMPT_CHARS)
        moved = [segment.shifted(piece.offset_cs) for segment in full.segments]
        return self.maker.add(moved, self.run.language)

    def _detected(self, stderr: str) -> None:
        """The detected language and its probability, printed by whisper.cpp when it detected
        one (a multilingual model and no --language); later pieces are told it."""
        detected = fulljson.detected_language(stderr)
        if self.language == "auto" and detected is not None:
            self.run.language, self.run.language_probability = detected
        if self.language == "auto" and self.run.language:
            self.language = self.run.language


def _tail(text: str, chars: int) -> str:
    """The last `chars` characters of `text`, from a word's start."""
    if len(text) <= chars:
        return text
    cut = text[-chars:]
    space = cut.find(" ")
    return cut[space:] if space >= 0 else cut
