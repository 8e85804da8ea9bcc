"""`kvscribe bench --batch-sizes`: each batching cell at each batch size, and one real run
whose trade-off table, chart and figures must agree with each other."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from kvscribe.audio import SAMPLE_RATE
from kvscribe.bench.cells import Cell, batches, matrix, mirror_of, parse_batch_sizes
from kvscribe.bench.clips import read_manifest, shipped
from kvscribe.bench.worker import decode_request, warm_up_clips
from kvscribe.errors import UsageError
from tests import media
from tests.conftest import run_cli


def test_batch_sizes_parse_in_order_once_each():
    assert parse_batch_sizes(["1,8,16"]) == [1, 8, 16]
    assert parse_batch_sizes(["8", " 1, 8 "]) == [8, 1]
    for bad in ("0", "65", "x", "1.5", "-1", ","):
        with pytest.raises(UsageError) as raised:
            parse_batch_sizes([bad])
        assert raised.value.subject == "--batch-sizes"


def test_matrix_runs_each_batching_cell_at_each_batch_size():
    backends = ["transformers", "ctranslate2", "whispercpp"]
    cells = matrix(backends, ["cpu-laptop"], ["q8_0"], [None], True, [1, 8])
    assert [c.label for c in cells if c.backend == "transformers"] == [
        "transformers: full / full, batch 1",
        "transformers: full / full, batch 8",
        "transformers: cpu-laptop, batch 1",
        "transformers: cpu-laptop, batch 8",
        "transformers: q8_0 / shared, batch 1",
        "transformers: q8_0 / shared, batch 8",
    ]
    assert [c.batch_size for c in cells if c.backend == "ctranslate2" and c.kind == "kvscribe"] == [
        1,
        8,
    ]
    whispercpp = [c for c in cells if c.backend == "whispercpp" and c.kind == "kvscribe"]
    assert [c.label for c in whispercpp] == [  # batch > 1 on long audio: whisper-cli's -p
        "whispercpp: cpu-laptop, batch 1",
        "whispercpp: cpu-laptop, batch 8",
        "whispercpp: q8_0 / shared,q8_0, batch 1",
        "whispercpp: q8_0 / shared,q8_0, batch 8",
        "whispercpp: q4_0 / shared,q4_0, batch 1",
        "whispercpp: q4_0 / shared,q4_0, batch 8",
        "whispercpp: full / shared,q8_0, batch 1",
        "whispercpp: full / shared,q8_0, batch 8",
    ]
    assert cells[1].unbatched_label == "transformers: full / full"
    # Engines called directly decode sequentially: they mirror the batch-1 cell.
    faster = next(c for c in cells if c.kind == "faster-whisper")
    assert mirror_of(faster, cells) == Cell(
        "kvscribe", "ctranslate2", None, "cpu-laptop", None, None, 1
    )
    # faster-whisper's batched pipeline mirrors the batched cell, so its ratio compares
    # like with like
    batched = next(c for c in cells if c.kind == "faster-whisper-batched")
    assert mirror_of(batched, cells) == Cell(
        "kvscribe", "ctranslate2", None, "cpu-laptop", None, None, 8
    )
    assert matrix(backends, ["cpu-laptop"], None, [None], False) == matrix(
        backends, ["cpu-laptop"], None, [None], False, None
    )
    assert not any(c.batch_size for c in matrix(backends, ["cpu-laptop"], None, [None], True))
    assert [c.batch_size for c in matrix(["whispercpp"], ["cpu-laptop"], None, [None], False, [8])]
    assert all(batches(name) for name in backends)


def test_batch_sizes_need_a_backend_that_batches(monkeypatch):
    from kvscribe.bench import cells as cells_module

    monkeypatch.setattr(cells_module, "batches", lambda name: False)  # a plugin without batching
    with pytest.raises(UsageError, match="batch sizes are run by"):
        matrix(["whispercpp"], ["cpu-laptop"], None, [None], False, [8])


def test_worker_asks_for_the_cells_batch_size_and_warms_its_path():
    cell = Cell("kvscribe", "transformers", None, "cpu-laptop")
    assert decode_request(dataclasses.replace(cell, batch_size=1)).batch_size == 1
    assert decode_request(cell).batch_size is None  # the profile's
    short, long = shipped()

    def warmed(cell: Cell, clips) -> list[str]:
        return [clip.name for clip in warm_up_clips(cell, clips)]

    batched = dataclasses.replace(cell, batch_size=4)
    assert warmed(batched, [short, long]) == [short.name, long.name]
    assert warmed(cell, [short, long]) == [short.name, long.name]  # the profile's may batch
    assert warmed(dataclasses.replace(cell, batch_size=1), [short, long]) == [short.name]
    assert warmed(batched, [long, short]) == [long.name]
    whispercpp = Cell("kvscribe", "whispercpp", None, "cpu-laptop")
    assert warmed(whispercpp, [short, long]) == [short.name, long.name]  # -p on long audio
    faster = Cell("faster-whisper", "ctranslate2", None, "cpu-laptop")
    assert warmed(faster, [short, long]) == [short.name]  # engines called directly never batch


@pytest.mark.slow
def test_bad_batch_sizes_are_one_line_usage_errors():
    for args in (["--batch-sizes", "0"], ["--batch-sizes", "65"], ["--batch-sizes", "8,x"]):
        result = run_cli("bench", "--profile", "cpu-laptop", *args)
        assert result.code == 2, result.stderr
        assert "--batch-sizes" in result.stderr and "Traceback" not in result.stderr
    # An unknown backend or profile is a usage error, not a cell skipped (which exited 1).
    for args, said in ((["-b", "bogus"], "unknown backend"), (["-p", "nope"], "unknown profile")):
        result = run_cli("bench", *args)
        assert result.code == 2 and said in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1


# The shipped long clip (50 s, eleven recordings) up to the pause after its ninth, which
# ends "...more respectable than he was": still over a window and two speech chunks, with
# 30 % less audio to decode twice in each of six cells.
LONG_CLIP_HEAD = (35.34, "more respectable than he was")


@pytest.fixture(scope="module")
def batch_bench(tmp_path_factory):
    """The shipped long clip's head (35 s: two speech chunks) at batch 1 and 4, without the
    warm-ups (each would decode the clip once more): the figures are checked against each
    other, not timed."""
    folder = tmp_path_factory.mktemp("batch-bench")
    long_clip = max(shipped(), key=lambda clip: clip.seconds)
    seconds, last_words = LONG_CLIP_HEAD
    audio = (folder / long_clip.name).with_suffix(".wav")
    media.write_wav(audio, long_clip.audio[: int(seconds * SAMPLE_RATE)])
    reference = long_clip.reference[: long_clip.reference.index(last_words) + len(last_words)]
    manifest = folder / "clips.tsv"
    manifest.write_text(f"{audio}\t{reference}", encoding="utf-8")
    args = ["bench", "--manifest", manifest, "--profile", "cpu-laptop"]
    args += ["-b", "transformers", "-b", "ctranslate2"]
    args += [
        "--policy",
        "full",
        "--batch-sizes",
        "1,4",
        "--no-warm-up",
        "--json",
        folder / "b.json",
    ]
    args += ["--markdown", folder / "b.md", "--csv", folder / "b.csv", "--plot", folder / "plots"]
    result = run_cli(*args, timeout=900)
    assert result.code == 0, result.stderr
    data = json.loads((folder / "b.json").read_text())
    return folder, data, {c["label"]: c for c in data["cells"]}


@pytest.mark.slow
def test_batch_bench_reports_one_tradeoff_table(batch_bench):
    folder, data, cells = batch_bench
    settings = ["transformers: full / full", "transformers: cpu-laptop", "ctranslate2: cpu-laptop"]
    rows = data["batch_tradeoff"]
    assert [(r["cell"], r["batch_size"]) for r in rows] == [
        (s, b) for s in settings for b in (1, 4)
    ]
    markdown = (folder / "b.md").read_text()
    assert "## Batch trade-off: WER x KV memory x speed (MB = 10^6 bytes)" in markdown
    for row in rows:
        cell = cells[row["label"]]
        assert row["kv_peak_bytes"] == cell["kv_self_peak_bytes"] + cell["kv_cross_bytes"]
        estimated = row["cell"].startswith("ctranslate2")  # CTranslate2 hides its cache
        assert row["kv_peak_provenance"] == ("estimated" if estimated else "measured")
        shown = f"| {row['cell']} | {row['batch_size']} | {row['wer']:.3f} | "
        shown += f"{row['kv_peak_bytes'] / 1e6:.2f} MB" + (" (estimated)" if estimated else "")
        assert shown + " | " in markdown
    csv_rows = list(csv.DictReader((folder / "b.csv").open()))
    assert [r["batch_size"] for r in csv_rows] == ["1", "4"] * 3
    png = (folder / "plots" / "batch_tradeoff.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_batch_bench_figures_agree_with_each_other(batch_bench):
    from kvscribe.chunking import speech_chunks

    folder, data, cells = batch_bench
    clip = read_manifest(folder / "clips.tsv")[0]
    audio, long_chunks = clip.seconds, len(speech_chunks(clip.audio))
    assert long_chunks == 2
    for label, cell in cells.items():
        batch = cell["batch_size"]
        assert cell["batch_size_run"] == batch
        # Batch 1 is the sequential path, asked for explicitly; batch 4 the batched one.
        assert ("batch size" in cell["settings"]) == (batch == 4), label
        assert cell["audio_seconds_per_second"] == pytest.approx(audio / cell["seconds"], 1e-3)
        one = cells[label.replace(", batch 4", ", batch 1")]
        assert cell["speedup_vs_batch_1"] == pytest.approx(one["seconds"] / cell["seconds"], 1e-3)
        assert 0 <= cell["wer"] <= 0.2
    # A per-beam cross-attention cache is held once per chunk decoding together.
    full_1, full_4 = (cells[f"transformers: full / full, batch {b}"] for b in (1, 4))
    assert full_4["kv_cross_bytes"] == min(4, long_chunks) * full_1["kv_cross_bytes"]
    # KV vs full compares like with like: the full cache at the same batch size.
    laptop_4 = cells["transformers: cpu-laptop, batch 4"]
    expected = round(100 * _kv_total(laptop_4) / _kv_total(full_4), 1)
    assert full_4["kv_vs_full_pct"] == 100 and laptop_4["kv_vs_full_pct"] == expected
    assert cells["ctranslate2: cpu-laptop, batch 4"]["kv_provenance"] == {
        "self": "estimated",
        "cross": "estimated",
    }
    assert all(c["verdict"] == "not measured" for c in data["claims"])  # no policy cells
    # --no-warm-up: no cell decoded anything before its timed run, and the report says so.
    assert all(cell["warmed_up"] == [] for cell in cells.values())
    assert data["meta"]["warm-up"].startswith("none (--no-warm-up)")
    assert "- warm-up: none (--no-warm-up)" in (folder / "b.md").read_text()


def _kv_total(cell: dict) -> int:
    return cell["kv_self_peak_bytes"] + cell["kv_cross_bytes"]


@pytest.mark.slow
def test_batch_chart_shows_each_setting_per_batch_size(batch_bench):
    from kvscribe.bench.figures import CellFigures
    from kvscribe.bench.plots import batch_figure, pyplot

    _, data, _ = batch_bench
    figures = [
        CellFigures(**{**c, "kv_trace": [tuple(p) for p in c["kv_trace"]]}) for c in data["cells"]
    ]
    plt = pyplot()
    chart = batch_figure(plt, figures)
    wer_ax, kv_ax, speed_ax = chart.axes
    for ax in (wer_ax, kv_ax, speed_ax):
        assert ax.get_xlabel().startswith("batch size") and ax.get_ylabel()
        assert [round(t) for t in ax.get_xticks()] == [1, 4]
        assert len(ax.get_lines()) == 3  # one per setting
    assert "MB = 10^6 bytes" in kv_ax.get_ylabel() and "audio seconds" in speed_ax.get_ylabel()
    legend = [t.get_text() for t in kv_ax.get_legend().get_texts()]
    assert legend == [
        "transformers: full / full",
        "transformers: cpu-laptop",
        "ctranslate2: cpu-laptop (KV estimated)",
    ]
    throughput = speed_ax.get_lines()[2].get_ydata()
    ct2 = [data["batch_tradeoff"][i]["audio_seconds_per_second"] for i in (4, 5)]
    assert list(throughput) == ct2
    plt.close(chart)
