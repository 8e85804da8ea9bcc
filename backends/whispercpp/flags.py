"""kvscribe's decoding choices as whisper-cli flags, with what whisper.cpp does differently.

Temperature fallback (whisper.cpp 1.8.5, src/whisper.cpp whisper_full_with_state): the
temperatures are `-tp`, `-tp + -tpi`, ... up to 1.0 (`-nf`: `-tp` alone). A decode is
retried at the next one when a decoder's last 32 tokens have an entropy below `-et`, or
its mean token log-probability is below `-lpt` while the no-speech probability is below
`-nth`; a window whose no-speech probability is above `-nth` and mean log-probability
below `-lpt` gives no text. Above temperature 0, `-bo` samples are drawn.

whisper.cpp has no compression-ratio test: its repetition test is that entropy, a
different measure on a different scale (a looping decode has a *low* entropy and a *high*
compression ratio; 2.4 is both defaults, but a stricter ratio would be a looser entropy
bound), so the ratio is never passed as `-et`: its test stays whisper.cpp's own (-et 2.4),
or off (-et 0) when the ratio test is off.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kvscribe import setting_rows as row
from kvscribe.decoding import Fallback, temperatures_from
from kvscribe.errors import UsageError

MAX_DECODERS = 8  # WHISPER_MAX_DECODERS: beams and best-of above it fail the whole run
ENTROPY_THRESHOLD = 2.4  # whisper.cpp's default -et
# Values that switch a test off: no mean log-probability is below -inf, and no
# probability above 1 (nor an entropy below 0).
LOGPROB_OFF = "-inf"
NO_SPEECH_OFF = "1"
ENTROPY_OFF = "0"
DEFAULT_CONTEXT = -1  # -mc: whisper.cpp's own budget (half the text context)


@dataclass
class Flags:
    """whisper-cli arguments, the settings they stand for, and what could not be honoured."""

    argv: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    not_applicable: list[str] = field(default_factory=list)


def fallback_flags(fallback: Fallback) -> Flags:
    """-tp/-tpi/-nf, -et, -lpt, -nth and -bo for a Fallback, and the rule they run worded
    as every backend words it (Fallback.describe), whisper.cpp's entropy test named."""
    flags = Flags()
    ladder = _temperatures(fallback.temperatures, flags)
    _repetition(fallback.compression_ratio_threshold, flags)
    _thresholds(fallback, flags)
    check_decoders(fallback.best_of, "--best-of")
    flags.argv += ["-bo", str(fallback.best_of)]
    ran = dataclasses.replace(fallback, temperatures=ladder)
    flags.settings[row.TEMPERATURE_FALLBACK] = ran.describe(
        repetition_test=f"entropy < {_number(ENTROPY_THRESHOLD)} (whisper.cpp's repetition test)"
    )
    flags.settings[row.FALLBACK_FLAGS] = " ".join(flags.argv)
    return flags


def check_decoders(count: int, subject: str) -> None:
    if not 1 <= count <= MAX_DECODERS:
        raise UsageError(
            f"whisper.cpp runs 1 to {MAX_DECODERS} decoders, not {count}",
            subject=subject,
            hint=f"give a number from 1 to {MAX_DECODERS}",
        )


def _temperatures(temperatures: tuple[float, ...], flags: Flags) -> tuple[float, ...]:
    """The flags for `temperatures`, and the temperatures whisper.cpp will run."""
    if not temperatures:
        raise UsageError("no temperature to decode at", subject="--temperature", hint="e.g. 0")
    start = temperatures[0]
    flags.argv += ["-tp", _number(start)]
    if len(temperatures) == 1:
        flags.argv.append("-nf")
        return (start,)
    increment = round(temperatures[1] - start, 6)
    flags.argv += ["-tpi", _number(increment)]
    ladder = temperatures_from(start, increment) if increment > 0 else (start,)
    if tuple(round(t, 6) for t in temperatures) != ladder:
        flags.not_applicable.append(
            f"temperatures {', '.join(_number(t) for t in temperatures)}: whisper.cpp steps "
            f"evenly from its first up to 1.0 (-tp {_number(start)} -tpi "
            f"{_number(increment)}), so it ran {', '.join(_number(t) for t in ladder)}"
        )
    return ladder


def _repetition(ratio: float | None, flags: Flags) -> None:
    if ratio is None:
        flags.argv += ["-et", ENTROPY_OFF]
        return
    flags.argv += ["-et", _number(ENTROPY_THRESHOLD)]
    flags.not_applicable.append(
        f"compression ratio threshold {_number(ratio)}: whisper.cpp has no compression-ratio "
        f"test; it retries a decode whose last 32 tokens have an entropy below "
        f"{ENTROPY_THRESHOLD} instead"
    )


def _thresholds(fallback: Fallback, flags: Flags) -> None:
    logprob, no_speech = fallback.logprob_threshold, fallback.no_speech_threshold
    flags.argv += ["-lpt", LOGPROB_OFF if logprob is None else _number(logprob)]
    flags.argv += ["-nth", NO_SPEECH_OFF if no_speech is None else _number(no_speech)]
    if logprob is None and no_speech is not None:
        flags.not_applicable.append(
            f"no-speech threshold {_number(no_speech)} without a logprob threshold: whisper.cpp "
            "skips a window as silence only when its mean log-probability is also below -lpt, "
            "so nothing is skipped (openai-whisper would skip on the no-speech probability)"
        )


def context_flags(
    condition: bool | None, prompt: str | None, profile_max_context: int
) -> tuple[int, list[str]]:
    """The -mc value for --condition-on-previous-text (None: the profile's max_context; True:
    the profile's, or whisper.cpp's default where the profile has 0) and what could not be
    honoured. whisper.cpp's -mc 0 drops --prompt along with the previous text, so with a
    prompt (live mode's committed text is one) the conditioning stays on."""
    if condition is None:
        wanted = profile_max_context
    else:
        wanted = (profile_max_context or DEFAULT_CONTEXT) if condition else 0
    if wanted != 0 or not prompt:
        return wanted, []
    return DEFAULT_CONTEXT, [
        "no previous-text conditioning with a prompt: whisper.cpp's -mc 0 drops the prompt "
        f"too, so it ran with -mc {DEFAULT_CONTEXT} and windows after the first were "
        "conditioned on the text before them"
    ]


def _number(value: float) -> str:
    return f"{value:g}"
