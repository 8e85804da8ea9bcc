"""`kvscribe mic`'s parameters, as the table its command is given (cli.parameters).

Each flag is declared here once (or in cli/shared_options.py when `kvscribe transcribe`
takes it too); one named like a LiveOptions field reaches it with no more code.
"""

from __future__ import annotations

from pathlib import Path

import typer

from kvscribe.cli import shared_options as shared
from kvscribe.cli.parameters import ParameterTable
from kvscribe.options import LiveOptions

_STREAMING = "Streaming"


PARAMETERS: ParameterTable = {
    "live": (
        bool,
        typer.Option(
            True, "--live", help="Show text as it is spoken (the only mode: kept for scripts)."
        ),
    ),
    "list_devices": (
        bool,
        typer.Option(False, "--list-devices", help="List the input devices and exit."),
    ),
    "mic_device": (
        str,
        typer.Option(
            None,
            "--mic",
            metavar="INDEX|NAME",
            show_default="the system's default input",
            help="Record from this input device (see --list-devices): its index, its name, or a"
            " part of its name that only it has.",
        ),
    ),
    "source": (
        str,
        typer.Option(
            None,
            "--input",
            "-i",
            metavar="FILE|-",
            help="Instead of a microphone: replay an audio FILE at real-time pace, or read raw "
            "s16le 16 kHz mono PCM from stdin ('-') or a named pipe as it arrives.",
        ),
    ),
    "as_fast_as_possible": (
        bool,
        typer.Option(
            False, "--as-fast-as-possible", help="Replay --input FILE as fast as it is decoded."
        ),
    ),
    "output": (
        Path,
        typer.Option(
            None,
            "--output",
            "-o",
            dir_okay=False,
            help="Append committed text to this file as it is committed (one line per utterance).",
        ),
    ),
    **shared.parameters(shared.ENGINE, mic=True),
    "prompt": (
        str,
        typer.Option(
            None,
            "--prompt",
            "--initial-prompt",
            metavar="TEXT",
            help="Context for the decoder, e.g. names and terms it should spell your way "
            "(--initial-prompt, as file runs spell it, works too).",
        ),
    ),
    **shared.parameters(shared.DECODING, mic=True),
    "step": (
        float,
        typer.Option(
            LiveOptions.step,
            "--step",
            help="Seconds of new audio between re-decodes.",
            rich_help_panel=_STREAMING,
        ),
    ),
    "min_silence": (
        float,
        typer.Option(
            LiveOptions.min_silence,
            "--min-silence",
            help="Seconds of silence that end an utterance.",
            rich_help_panel=_STREAMING,
        ),
    ),
    "commit_silence": (
        float,
        typer.Option(
            LiveOptions.commit_silence,
            "--commit-silence",
            help="Seconds of silence after which an utterance's words are committed, before "
            "--min-silence ends it (speech that resumes continues the utterance); an utterance "
            "under 2.5 s with no --context before it waits for its end.",
            rich_help_panel=_STREAMING,
        ),
    ),
    "context": (
        float,
        typer.Option(
            LiveOptions.context,
            "--context",
            help="Seconds of the utterances before it that a new utterance is decoded with "
            "(their words are not committed again); 0: each utterance alone.",
            rich_help_panel=_STREAMING,
        ),
    ),
    "hold_unsure": (
        float,
        typer.Option(
            LiveOptions.hold_unsure,
            "--hold-unsure",
            help="Seconds after speech stops that an utterance's unsure last words (read under "
            "an even chance) wait for more speech, to be read again with it; 0: commit them "
            "at once (docs/live.md, 'Unsure last words').",
            rich_help_panel=_STREAMING,
        ),
    ),
    "encoder_window": (
        float | None,
        typer.Option(
            None,
            "--encoder-window",
            show_default="30: Whisper's whole window",
            help="Decode each buffer in an encoder window of its length + 2 s, at least this "
            "many seconds (ctranslate2): faster decodes, but read speech lost words "
            "(docs/live.md, 'Encoder window').",
            rich_help_panel=_STREAMING,
        ),
    ),
    "vad_threshold": (
        float,
        typer.Option(
            LiveOptions.vad_threshold,
            "--vad-threshold",
            help="Speech probability that starts an utterance.",
            rich_help_panel=_STREAMING,
        ),
    ),
    **shared.parameters(shared.REPORT, mic=True),
}
