"""One device rule for file runs, live sessions and bench; decimal byte units everywhere;
every KV figure says whether it was measured, derived or estimated.

CUDA decisions are reached on this CPU-only machine by telling kvscribe the machine has a
CUDA device (kvscribe.machine.hardware.detect); nothing here fakes a transcription."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from kvscribe import profile as profiles
from kvscribe.backends.whispercpp import self_cache_bytes
from kvscribe.bench.cells import Cell
from kvscribe.bench.figures import CellFigures
from kvscribe.bench.placement import place
from kvscribe.bench.report import as_csv, as_markdown, rich_table
from kvscribe.cli.live import live_stats_table
from kvscribe.cli.render import human_bytes, stats_table
from kvscribe.contract import DecoderReport
from kvscribe.devices import device_for
from kvscribe.errors import ExitCode, UsageError
from kvscribe.live.stats import LiveStats
from kvscribe.machine import hardware
from kvscribe.provenance import DERIVED, ESTIMATED, MEASURED, make_provenance, weakest_provenance
from kvscribe.stats import FileStats, RunStats
from tests.conftest import SAMPLE, run_cli

BIG_GPU = hardware.Hardware(1, 80.0)
NO_GPU = hardware.Hardware(0, None)
WHISPERCPP_DEVICES = ("cpu",)


def _text(renderable) -> str:
    console = Console(width=200, file=io.StringIO())
    console.print(renderable)
    return console.file.getvalue()


def _row(shown: str, label: str) -> str:
    """The value beside `label` in a rendered two-column table."""
    line = next(line for line in shown.splitlines() if line.startswith(label))
    return line[len(label) :].strip()


# -- task 2: one device rule ------------------------------------------------------------------


def test_a_profile_device_the_backend_cannot_use_falls_back_with_a_note():
    choice = device_for("whispercpp", WHISPERCPP_DEVICES, profiles.load("gpu"), None, BIG_GPU)
    assert choice.device == "cpu"
    assert choice.note == "device: cpu (whispercpp runs on CPU only; profile gpu asked cuda)"


def test_auto_is_a_preference_too():
    choice = device_for("whispercpp", WHISPERCPP_DEVICES, profiles.load("gpu"), "auto", BIG_GPU)
    assert choice.device == "cpu" and "--device auto asked cuda" in choice.note


def test_a_device_the_user_named_is_kept_or_refused_never_swapped():
    with pytest.raises(UsageError, match="backend whispercpp cannot run on cuda"):
        device_for("whispercpp", WHISPERCPP_DEVICES, profiles.load("cpu-laptop"), "cuda", BIG_GPU)
    kept = device_for("ctranslate2", ("cpu", "cuda"), profiles.load("gpu"), None, BIG_GPU)
    assert kept.device == "cuda" and kept.note is None


def test_only_a_device_other_than_the_one_asked_for_gets_a_note():
    plain = device_for("whispercpp", WHISPERCPP_DEVICES, profiles.load("auto"), None, NO_GPU)
    assert plain.device == "cpu" and plain.note is None
    # The gpu profile names cuda itself, whatever the machine has.
    named = device_for("whispercpp", WHISPERCPP_DEVICES, profiles.load("gpu"), None, NO_GPU)
    assert named.device == "cpu" and "profile gpu asked cuda" in named.note


def test_whispercpp_on_a_cuda_machine_runs_on_cpu_and_the_stats_say_why(whisper_cli, monkeypatch):
    from kvscribe.options import TranscribeOptions
    from kvscribe.runner import load_backend

    monkeypatch.setattr(hardware, "detect", lambda: BIG_GPU)  # auto -> gpu profile -> cuda
    options = TranscribeOptions(inputs=(SAMPLE,), backend="whispercpp")
    backend, stats = load_backend(options)
    assert backend.device == stats.device == "cpu"
    assert stats.notes == ["device: cpu (whispercpp runs on CPU only; profile gpu asked cuda)"]
    stats.finish()
    report = stats.to_dict()
    assert report["notes"] == stats.notes
    assert "whispercpp runs on CPU only" in _text(stats_table(report))


@pytest.mark.whispercpp  # the device is checked once the backend is available
def test_whispercpp_with_device_cuda_named_is_still_a_usage_error():
    result = run_cli(SAMPLE, "--backend", "whispercpp", "--device", "cuda")
    assert result.code == ExitCode.USAGE, result.stderr
    assert "backend whispercpp cannot run on cuda" in result.stderr
    assert result.stderr.count("\n") == 1


# -- task 1: bench --device ---------------------------------------------------------------------


def _cells() -> list[Cell]:
    return [Cell("kvscribe", b, None, "cpu-laptop") for b in ("ctranslate2", "whispercpp")]


@pytest.mark.whispercpp  # bench places whispercpp only where whisper-cli runs
def test_bench_auto_on_a_cuda_machine_runs_whispercpp_on_cpu_with_a_note():
    placement = place(_cells(), "auto", BIG_GPU)
    devices = {cell.backend: choice for cell, choice in placement.devices.items()}
    assert devices["ctranslate2"].device == "cuda" and devices["ctranslate2"].note is None
    assert devices["whispercpp"].device == "cpu"
    assert "whispercpp runs on CPU only" in devices["whispercpp"].note
    assert placement.skipped == {}
    assert placement.describe({"cuda", "cpu"}).startswith("--device auto: ran on cpu, cuda (")


@pytest.mark.whispercpp  # bench places whispercpp only where whisper-cli runs
def test_bench_cuda_named_skips_whispercpp_with_the_reason():
    placement = place(_cells(), "cuda", BIG_GPU)
    assert [c.backend for c in placement.devices] == ["ctranslate2"]
    assert "cannot run on cuda" in placement.skipped["whispercpp: cpu-laptop"]


def test_bench_auto_without_cuda_is_cpu_for_every_cell():
    placement = place(_cells(), "auto", NO_GPU)
    assert {c.device for c in placement.devices.values()} == {"cpu"}
    assert all(c.note is None for c in placement.devices.values())


def test_bench_device_cuda_on_a_machine_without_one_is_exit_6():
    if hardware.detect().has_cuda:
        pytest.skip("this machine has CUDA: --device cuda is valid here")
    result = run_cli("bench", "--device", "cuda", "-b", "ctranslate2")
    assert result.code == ExitCode.BACKEND_UNAVAILABLE, result.stderr
    assert result.stderr.count("\n") == 1 and "no CUDA device found" in result.stderr


def _figure(**changes) -> CellFigures:
    fields = dict(
        label="whispercpp: cpu-laptop",
        kind="kvscribe",
        backend="whispercpp",
        model="tiny.en",
        profile="cpu-laptop",
        policy="profile's",
        reference=True,
        wer=0.0,
        seconds=1.0,
        real_time_factor=0.1,
        tokens=30,
        kv_self_peak_bytes=11_010_048,
        kv_cross_bytes=9_437_184,
        kv_estimated=False,
        decode_ms_p50=None,
        decode_ms_p95=None,
        encoder_ms=None,
        peak_rss_bytes=200_000_000,
        kv_provenance=make_provenance(DERIVED, MEASURED),
        device="cpu",
        device_note="device: cpu (whispercpp runs on CPU only; --device auto asked cuda)",
    )
    return CellFigures(**{**fields, **changes})


def test_bench_rows_carry_device_provenance_and_decimal_units():
    figure = _figure()
    table = _text(rich_table([figure]))
    assert "kvscribe bench (MB = 10^6 bytes)" in table
    assert "11.01 MB (derived)" in table and "9.44 MB" in table and "9.44 MB (" not in table
    assert "cpu (fallback)" in table
    markdown = as_markdown([figure], [], {"device": "--device auto: ran on cpu"}, {"x": "why"})
    assert markdown.startswith("# kvscribe bench (MB = 10^6 bytes)")
    assert "| device |" in markdown and "## Notes" in markdown
    assert "whispercpp runs on CPU only" in markdown and "x: skipped: why" in markdown
    row = as_csv([figure]).splitlines()
    header, values = row[0].split(","), row[1].split(",")
    cells = dict(zip(header, values, strict=False))
    assert cells["device"] == "cpu" and cells["kv_self_provenance"] == DERIVED
    assert cells["kv_cross_provenance"] == MEASURED


# -- task 5: decimal MB -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (999, "999 B"),
        (1_500, "1.5 kB"),
        (1_500_000, "1.5 MB"),  # 1.4 MB in 2^20 units
        (18_432_000, "18.4 MB"),  # tiny.en's fp32 cross-attention cache
        (2_000_000_000, "2.0 GB"),
        (None, "unavailable"),
    ],
)
def test_bytes_are_shown_in_decimal_units(count, shown):
    assert human_bytes(count) == shown


def _run_stats(report: DecoderReport) -> dict:
    stats = RunStats(backend="whispercpp", profile="cpu-laptop", model="tiny.en", device="cpu")
    stats.files.append(FileStats("a.wav", audio_seconds=11.0, decode_seconds=1.0, report=report))
    stats.started -= 2.0  # as if it had taken a real run's time (no zero real-time factor)
    stats.finish()
    return stats.to_dict()


def test_stats_table_names_its_unit_and_marks_derived_figures():
    report = DecoderReport(kv_self_peak_bytes=11_010_048, kv_cross_bytes=9_437_184)
    report.kv_self_full_bytes = report.kv_self_peak_bytes
    report.kv_provenance = make_provenance(DERIVED, MEASURED)
    stats = _run_stats(report)
    assert stats["kv_provenance"] == {"self": DERIVED, "cross": MEASURED}
    assert stats["kv_estimated"] is False  # still written, for older readers
    shown = _text(stats_table(stats))
    assert "kvscribe stats (MB = 10^6 bytes)" in shown
    assert _row(shown, "self-attn KV peak").startswith("11.0 MB (derived)")
    assert _row(shown, "cross-attn KV") == "9.4 MB"  # whisper.cpp's own figure: measured


# -- task 6: provenance ----------------------------------------------------------------------


def test_whispercpp_self_cache_is_measured_at_one_decoder_and_derived_for_beams():
    assert self_cache_bytes(1_572_864, 1) == (1_572_864, MEASURED)
    assert self_cache_bytes(1_572_864, 5) == (1_572_864 * 7, DERIVED)


def test_the_weakest_provenance_wins_per_figure():
    merged = weakest_provenance(
        [make_provenance(MEASURED), make_provenance(DERIVED, MEASURED), {"self": ESTIMATED}]
    )
    assert merged == {"self": ESTIMATED, "cross": ESTIMATED}  # a missing figure: estimated
    assert weakest_provenance([]) == make_provenance(MEASURED)


@pytest.mark.slow
def test_whispercpp_stats_json_marks_its_beam_figure_derived(whisper_cli, tmp_path):
    path = tmp_path / "stats.json"
    result = run_cli(SAMPLE, "-b", "whispercpp", "--profile", "cpu-laptop", "--stats-json", path)
    assert result.code == 0, result.stderr
    report = json.loads(path.read_text())
    assert report["kv_provenance"] == {"self": DERIVED, "cross": MEASURED}  # beam 5
    assert report["kv_estimated"] is False
    assert "(derived)" in result.stderr and "MB = 10^6 bytes" in result.stderr


# -- task 4: live carries not-applicable notes and provenance ---------------------------------


def _live_stats() -> LiveStats:
    stats = LiveStats("ctranslate2", "tiny-vram", "tiny.en", "jfk.wav", paced=False, device="cpu")
    report = DecoderReport(kv_self_peak_bytes=258_048, kv_cross_bytes=18_432_000)
    report.not_applicable = ["self-attention policy 'window=128': CTranslate2 keeps every position"]
    stats.record_decode(0.5, report)
    stats.finish()
    return stats


def test_live_status_line_shows_estimated_and_not_applicable():
    from kvscribe.cli.live_view import LiveView

    view = LiveView(_live_stats(), None, quiet=True)
    status = view._status().plain
    assert "KV 18.7 MB (estimated)" in status
    assert "not applicable: self-attention policy 'window=128'" in status


def test_live_stats_table_shows_the_same_notes_as_file_runs():
    report = _live_stats().to_dict()
    assert report["kv_estimated"] is True and report["kv_provenance"]["self"] == ESTIMATED
    shown = _text(live_stats_table(report))
    assert "kvscribe live stats (MB = 10^6 bytes)" in shown
    assert "not applicable" in shown and "(estimated)" in shown


@pytest.mark.slow
def test_live_tiny_vram_on_ctranslate2_lists_what_it_cannot_honour(tmp_path):
    path = tmp_path / "stats.json"
    result = run_cli(
        "mic", "--live", "--input", SAMPLE, "--as-fast-as-possible", "--profile", "tiny-vram",
        "--step", "4", "--stats-json", path,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    report = json.loads(path.read_text())
    assert report["kv_estimated"] is True
    assert report["kv_provenance"] == {"self": ESTIMATED, "cross": ESTIMATED}
    assert any("CTranslate2 keeps every position" in n for n in report["not_applicable"])
    assert "not applicable" in result.stderr and "(estimated)" in result.stderr


# -- the machine a measurement is kept under ------------------------------------------------


def test_the_cpus_name_carries_its_family_and_model(tmp_path, monkeypatch):
    """A VM names Zen 4 and Zen 5 EPYCs alike ("AMD EPYC"); their speeds differ, so the
    encoder choice and result files carry the family and model numbers. (Both answers are
    cached per process: the functions under them are called here.)"""
    info = tmp_path / "cpuinfo"
    first = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
    first += "model name\t: AMD EPYC\nflags\t\t: fpu avx2\n"
    info.write_text(first + "\nprocessor\t: 1\nmodel\t\t: 9\nflags\t\t: amx_bf16\n")
    fields = hardware._cpuinfo_fields(info)
    monkeypatch.setattr(hardware, "_cpuinfo_fields", lambda: fields)
    assert hardware.cpu_name.__wrapped__() == "AMD EPYC (family 25, model 17)"
    assert hardware.cpu_multiplies_bfloat16.__wrapped__() is False  # the first block's flags
    bare = {"model name": "Some CPU"}
    monkeypatch.setattr(hardware, "_cpuinfo_fields", lambda: bare)
    assert hardware.cpu_name.__wrapped__() == "Some CPU"


def test_this_machines_cpu_name_is_read_from_its_cpuinfo():
    fields = hardware._cpuinfo_fields()
    name = hardware.cpu_name()
    assert name
    if "cpu family" in fields:
        assert f"(family {fields['cpu family']}, model {fields['model']})" in name


def test_a_long_session_counts_every_decode_and_cores_busy_stays_within_the_cores():
    """The recent decodes' times are kept for the p50; the count is of them all (3000
    decodes read 2280). CPU time comes in 10 ms ticks: over a session of a few milliseconds
    one tick read as 206 % of the cores."""
    from kvscribe.stats import CpuClock

    stats = LiveStats("ctranslate2", "tiny-vram", "tiny.en", "-", paced=False, device="cpu")
    decoded = DecoderReport()
    decoded.settings["previous-text prompt"] = "on"  # the profile's, for a file's windows
    for _ in range(3000):
        stats.record_decode(0.1, decoded)
    stats.finish()
    report = stats.to_dict()
    assert report["decodes"] == 3000 and report["decode_p50_seconds"] == 0.1
    assert report["settings"]["previous-text prompt"].startswith("not used live")
    clock = CpuClock(started=0.0, stopped=0.01)  # one tick over 2 ms of wall time
    assert clock.figures(0.002)["cores_busy"] == 1.0
