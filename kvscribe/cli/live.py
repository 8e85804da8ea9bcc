"""`kvscribe mic --live`: transcribe a microphone, a pipe or a replayed file as it is spoken."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from kvscribe import interrupts
from kvscribe import setting_rows as row
from kvscribe.atomic_file import atomic_write_text
from kvscribe.cli.live_parameters import PARAMETERS
from kvscribe.cli.parameters import option_values, takes
from kvscribe.cli.render import (
    cores_busy_rows,
    exit_with,
    figures_table,
    human_bytes,
    kv_rows,
    policy_rows,
    setup_logging,
    stderr_console,
)
from kvscribe.errors import ExitCode, InputNotFoundError, KvscribeError, Terminated, UsageError
from kvscribe.option_values import check_writable
from kvscribe.options import LiveOptions
from kvscribe.provenance import BYTES_UNIT
from kvscribe.stats import CpuClock


@takes(PARAMETERS)
def mic(**given: Any) -> None:
    """Transcribe as you speak: committed text as it settles, stats at the end.

    Voice activity detection cuts the stream into utterances; each is re-decoded as it
    grows and the words two decodes in a row agree on are committed. Ctrl-C finishes the
    utterance in progress, writes it, prints the stats and exits 0.
    """
    console = stderr_console()
    setup_logging(given["debug"])

    def body() -> int:
        if given["list_devices"]:
            return _list_devices()
        options = LiveOptions(
            **option_values(given, LiveOptions)
            | {"paced": not given["as_fast_as_possible"], "mic": given["mic_device"]}
        )
        check_writable(options.output, "--output")
        check_writable(options.stats_json, "--stats-json")
        _not_the_input(options)
        return _run(options, console)

    exit_with(body, console, given["debug"])


def _not_the_input(options: LiveOptions) -> None:
    """-o is appended to and --stats-json replaced: naming the replayed file would write
    into the recording."""
    if options.source in (None, "-") or not Path(options.source).is_file():
        return
    for path, flag in ((options.output, "--output"), (options.stats_json, "--stats-json")):
        if path is not None and path.is_file() and path.samefile(options.source):
            raise UsageError(
                "is the --input file", subject=flag, hint="pick another file for the text"
            )


def _list_devices() -> int:
    from kvscribe.live import microphone

    devices = microphone.input_devices()
    if not devices:
        raise InputNotFoundError(
            "no input devices found",
            subject="microphone",
            hint="plug one in, or transcribe a file or a pipe with --input FILE|-",
        )
    for d in devices:
        mark = "*" if d.is_default else " "
        sys.stdout.write(
            f"{mark} {d.index:3d}  {d.name}  ({d.host_api}, {d.channels} ch, "
            f"{d.default_rate:.0f} Hz)\n"
        )
    return ExitCode.OK


def _open_source(options: LiveOptions):
    from kvscribe.audio.stdin import is_pipe
    from kvscribe.live import capture, microphone

    if options.source == "-":
        return capture.PcmStdin(sys.stdin.buffer)
    if options.source is not None and is_pipe(options.source):  # <(arecord ...): as stdin
        return capture.PcmStdin(open(options.source, "rb"), name=options.source)
    if options.source is not None:
        if not options.source.strip():  # Path("") is the current folder
            raise UsageError("is empty", subject="--input", hint="name a file, or - for a pipe")
        return capture.FileReplay(Path(options.source), options.paced)
    return microphone.Microphone(microphone.pick(options.mic))


def _run(options: LiveOptions, console) -> int:
    from kvscribe.cli.live_view import LiveView, TranscriptFile
    from kvscribe.live.capture import Capture
    from kvscribe.live.session import LiveSession
    from kvscribe.live.stats import LiveStats
    from kvscribe.live.streaming import StreamSettings
    from kvscribe.runner import decode_request, load_backend
    from kvscribe.voice.silero import SileroVad, VadSettings, VoiceDetector

    source = _open_source(options)  # a missing file or microphone fails before the model loads
    vad = VadSettings(threshold=options.vad_threshold, min_silence=options.min_silence)
    streaming = StreamSettings(
        step=options.step,
        commit_silence=options.commit_silence,
        context=options.context,
        hold_unsure=options.hold_unsure,
        vad=vad,
    )
    detector = VoiceDetector(SileroVad(), vad)
    engine, loaded = load_backend(options)
    stats = LiveStats(
        backend=loaded.backend,
        profile=loaded.profile,
        model=loaded.model,
        source=source.label,
        paced=source.live,
        device=loaded.device,
        notes=list(loaded.notes),
        settings=loaded.settings | {row.STREAMING: streaming.describe()},
        load_seconds=loaded.load_seconds,
        cpu=CpuClock(),
    )
    transcript = TranscriptFile(options.output) if options.output is not None else None
    listening = _say_listening(source, console)
    view = LiveView(stats, transcript, options.quiet, on_first_audio=listening)
    session = LiveSession(
        engine, decode_request(options), Capture(source), detector, view, stats, streaming
    )
    failure: KvscribeError | None = None
    with view, _stop_on_signals(session, view.stopping):
        try:
            session.run()
        except KvscribeError as exc:  # the source failed part-way: what it gave is committed
            failure = exc
    if failure is None or stats.audio_seconds > 0:  # a source that gave nothing: its error
        _report(options, stats, console)
    if failure is not None:
        raise failure
    return ExitCode.OK


def _say_listening(source, console):
    """Said when the first audio arrives, not when the source opens: a device may take
    seconds to deliver its first block (PulseAudio's null sink, up to 2 s), and words
    spoken meanwhile are not recorded."""
    return lambda: console.print(f"[dim]kvscribe: listening to {source.label} (Ctrl-C to stop)[/]")


class _stop_on_signals:
    """First Ctrl-C (or SIGTERM): finish the utterance in progress and stop, saying so
    (`notice`: the final decode may take seconds). A second one: stop at once (exit 130, or
    143 for SIGTERM)."""

    def __init__(self, session, notice):
        self.session = session
        self.notice = notice
        self._previous: dict[int, object] = {}
        self._asked = False

    def __enter__(self) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            self._previous[number] = signal.signal(number, self._handle)

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number, frame) -> None:
        if self._asked:
            stop = Terminated() if number == signal.SIGTERM else KeyboardInterrupt()
            raise interrupts.raising(stop)  # counted: a native call that swallows it re-raises
        self._asked = True
        self.session.stop()
        self.notice()


def _report(options: LiveOptions, stats, console) -> None:
    report = stats.to_dict()
    if options.stats_json is not None:
        atomic_write_text(options.stats_json, json.dumps(report, indent=2) + "\n")
    if not options.quiet:
        console.print(live_stats_table(report))
    elif lost := _lost_audio(report):  # -q hides the figures, not a loss
        console.print(f"[yellow]kvscribe: warning:[/] {lost}", soft_wrap=True)


def live_stats_table(report: dict) -> Table:
    return figures_table(f"kvscribe live stats ({BYTES_UNIT})", _live_rows(report))


def _live_rows(r: dict) -> list[tuple[str, str]]:
    def secs(value) -> str:
        return "-" if value is None else f"{value:.2f} s"

    rtf = r["real_time_factor"]
    pace = "" if r["paced"] else " [dim](not real time: latencies are not live figures)[/]"
    rows = [
        ("backend / profile", f"{r['backend']} / {r['profile']}"),
        ("model / device", f"{r['model']} / {r['device']}"),
        *((k, v) for k, v in r["settings"].items()),
        ("source", r["source"]),
        ("audio", secs(r["audio_seconds"])),
        ("utterances", str(r["utterances"])),
        (
            "commit latency p50 / p95",
            f"{secs(r['latency_p50_seconds'])} / {secs(r['latency_p95_seconds'])}{pace}",
        ),
        (
            "  committed at a pause",
            f"{r['utterances_at_pause']} utterances, p50 {secs(r['latency_at_pause_p50_seconds'])}"
            " (the rest waited for their end)",
        ),
        ("real-time factor", "-" if rtf is None else f"{rtf:.3f} (busy / audio)"),
        (
            "decodes",
            f"{r['decodes']} (p50 {secs(r['decode_p50_seconds'])}; "
            f"{r['tails_read_again']} read on past words that stopped short of the speech)",
        ),
        (
            "unsure last words",
            f"{r['held_back']} utterance ends held them back, {r['held_resumed']} read again "
            "with the speech that followed",
        ),
        ("dropped audio", secs(r["dropped_audio_seconds"]) + _overflows(r["input_overflows"])),
        *cores_busy_rows(r),
        *kv_rows(r),
        ("peak RSS", human_bytes(r["peak_rss_bytes"])),
    ]
    if r["rss_end_bytes"] is not None:
        growth = r["rss_end_bytes"] - r["rss_after_warmup_bytes"]
        rows.append(
            (
                "RSS after warm-up / end",
                f"{human_bytes(r['rss_after_warmup_bytes'])} / {human_bytes(r['rss_end_bytes'])}"
                f" ({'+' if growth >= 0 else '-'}{human_bytes(abs(growth))})",
            )
        )
    if _lost_audio(r):
        rows.append(("warning", "this machine did not keep up: audio was dropped"))
    return rows + policy_rows(r["notes"], r["not_applicable"])


def _lost_audio(r: dict) -> str | None:
    """What was lost of the input, and what lightens the load (docs/live.md); None: nothing."""
    if r["dropped_audio_seconds"] == 0 and r["input_overflows"] == 0:
        return None
    return (
        f"this machine did not keep up: {r['dropped_audio_seconds']:.2f} s of audio was dropped"
        f"{_overflows(r['input_overflows'])} (--step 2 or --beam-size 1 lighten the load)"
    )


def _overflows(count: int) -> str:
    """The device's own losses, which PortAudio counts but does not measure."""
    if count == 0:
        return ""
    return f", and the device overflowed {count} time{'s' * (count != 1)} (length unknown)"
