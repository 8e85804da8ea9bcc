"""`kvscribe transcribe`'s parameters, as the table its command is given (cli.parameters).

Each flag is declared here once (or in cli/shared_options.py when `kvscribe mic` takes it
too); one named like a TranscribeOptions field reaches it with no more code.
"""

from __future__ import annotations

from pathlib import Path

import typer

from kvscribe.cli import batch_options
from kvscribe.cli import shared_options as shared
from kvscribe.cli.parameters import ParameterTable

_DECODING = shared.DECODING_PANEL
_WORDS = "Word timestamps"
_VAD = "Voice activity (--vad-filter)"


PARAMETERS: ParameterTable = {
    "files": (
        list[Path],
        typer.Argument(
            None,
            metavar="FILE...",
            show_default=False,
            help="Audio or video files, or folders of them.",
        ),
    ),
    **shared.parameters(shared.ENGINE),
    "output_format": (
        list[str],
        typer.Option(
            None,
            "--output-format",
            "-f",
            show_default="all with -o, else text on stdout",
            metavar="FORMAT[,FORMAT...]",
            help="txt, srt, vtt, json, tsv or all; comma-separated or repeated for several.",
        ),
    ),
    "output_dir": (
        Path,
        typer.Option(
            None,
            "--output-dir",
            "-o",
            file_okay=False,
            help="Write <stem>.<format> files into this folder.",
        ),
    ),
    "batch_size": (
        int,
        typer.Option(
            None,
            "--batch-size",
            show_default="profile's",
            help="Speech chunks decoded at once on audio over 30 s (cut at pauses by the VAD), "
            "and in -o by short files sharing them; 1 = one 30 s window after another, each "
            "prompted with the text before it (ctranslate2 on 2+ threads: the two halves of "
            "audio over 30 s side by side, cut at a pause).",
        ),
    ),
    "compute_type": (
        str,
        typer.Option(
            None,
            "--compute-type",
            show_default="profile's",
            help="Weights/compute precision: ctranslate2 int8, int8_float32, float16, "
            "float32, ...; transformers default (bfloat16 on CPUs with AMX, else float32; "
            "float16 on a GPU), float32, float16, bfloat16 or int8 (int8 linear layers, CPU "
            "only); "
            "whispercpp default, q8_0, q5_0 or q4_0 (weights quantized once by "
            "whisper-quantize).",
        ),
    ),
    "initial_prompt": (
        str,
        typer.Option(
            None,
            "--initial-prompt",
            metavar="TEXT",
            help="Text to prompt the first window with: names, spellings, the style wanted.",
            rich_help_panel=_DECODING,
        ),
    ),
    "condition_on_previous_text": (
        bool,
        typer.Option(
            None,
            "--condition-on-previous-text/--no-condition-on-previous-text",
            show_default="profile's",
            help="Prompt each window with the text before it (off: less looping, less context).",
            rich_help_panel=_DECODING,
        ),
    ),
    **shared.parameters(shared.DECODING),
    "clip_timestamps": (
        str,
        typer.Option(
            None,
            "--clip-timestamps",
            metavar="START,END,...",
            help="Decode only these spans (s), e.g. 0,30,95: 0-30 s and 95 s to the end; "
            "times stay the file's.",
            rich_help_panel=_DECODING,
        ),
    ),
    "word_timestamps": (
        bool,
        typer.Option(
            False,
            "--word-timestamps",
            help="Time every word (json words, word-level subtitles with the flags below).",
            rich_help_panel=_WORDS,
        ),
    ),
    "highlight_words": (
        bool,
        typer.Option(
            False,
            "--highlight-words",
            help="srt/vtt: underline each word as it is spoken.",
            rich_help_panel=_WORDS,
        ),
    ),
    "max_line_width": (
        int,
        typer.Option(
            None, "--max-line-width", help="srt/vtt: characters per line.", rich_help_panel=_WORDS
        ),
    ),
    "max_line_count": (
        int,
        typer.Option(
            None,
            "--max-line-count",
            help="srt/vtt: lines per cue (with --max-line-width).",
            rich_help_panel=_WORDS,
        ),
    ),
    "max_words_per_line": (
        int,
        typer.Option(
            None, "--max-words-per-line", help="srt/vtt: words per line.", rich_help_panel=_WORDS
        ),
    ),
    "word_level_tsv": (
        bool,
        typer.Option(
            False, "--word-level-tsv", help="tsv: one row per word.", rich_help_panel=_WORDS
        ),
    ),
    "vad_filter": (
        bool,
        typer.Option(
            False,
            "--vad-filter",
            help="Cut silence out before decoding (silero VAD); times stay the input's.",
            rich_help_panel=_VAD,
        ),
    ),
    "vad_threshold": (
        float,
        typer.Option(
            0.5,
            "--vad-threshold",
            help="Speech probability that counts as speech.",
            rich_help_panel=_VAD,
        ),
    ),
    "vad_min_speech": (
        float,
        typer.Option(
            0.0, "--vad-min-speech", help="Shorter speech (s) is dropped.", rich_help_panel=_VAD
        ),
    ),
    "vad_min_silence": (
        float,
        typer.Option(
            2.0, "--vad-min-silence", help="Shorter pauses (s) are kept.", rich_help_panel=_VAD
        ),
    ),
    "vad_pad": (
        float,
        typer.Option(
            0.4, "--vad-pad", help="Audio (s) kept either side of speech.", rich_help_panel=_VAD
        ),
    ),
    "recursive": (
        bool,
        typer.Option(
            False,
            "--recursive",
            "-r",
            help="Search folders' subfolders too.",
            rich_help_panel="Inputs",
        ),
    ),
    "glob": (
        list[str],
        typer.Option(
            None,
            "--glob",
            "-g",
            metavar="PATTERN",
            help="Only files in folders matching PATTERN (name or relative path); "
            "'!PATTERN' excludes. Repeatable.",
            rich_help_panel="Inputs",
        ),
    ),
    "output_name": (
        str,
        typer.Option(
            None,
            "--output-name",
            metavar="STEM",
            show_default="stdin",
            help="Name outputs of audio from stdin ('-') or one pipe, STEM.<format>.",
            rich_help_panel="Inputs",
        ),
    ),
    "input_format": (
        str,
        typer.Option(
            None,
            "--input-format",
            metavar="RAW",
            help="Audio on stdin or one pipe is raw 16 kHz mono PCM: s16le or f32le "
            "(no flag for a container).",
            rich_help_panel="Inputs",
        ),
    ),
    "files_from": (
        str,
        typer.Option(
            None,
            "--files-from",
            metavar="FILE|-",
            help="Also read input paths from FILE, one per line ('-': stdin).",
            rich_help_panel="Inputs",
        ),
    ),
    "jobs": (
        int,
        batch_options.JOBS,
    ),
    "force": (
        bool,
        batch_options.FORCE,
    ),
    "fail_fast": (
        bool,
        batch_options.FAIL_FAST,
    ),
    "json_events": (
        bool,
        batch_options.JSON_EVENTS,
    ),
    "cluster": (
        str,
        batch_options.CLUSTER,
    ),
    "ship_audio": (
        bool,
        batch_options.SHIP_AUDIO,
    ),
    **shared.parameters(shared.REPORT),
}
