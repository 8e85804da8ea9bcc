"""`kvscribe bench`: its parts, and one real run end to end on a tiny manifest whose
figures must agree with each other."""

from __future__ import annotations

import csv
import dataclasses
import json

import jiwer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscribe.bench.cells import (
    Cell,
    batches,
    matrix,
    mirror_of,
    parse_batch_sizes,
    split_policies,
)
from kvscribe.bench.clips import read_manifest, shipped
from kvscribe.bench.wer import pooled_wer
from kvscribe.bench.worker import decode_request, warm_up_clips
from kvscribe.errors import UsageError
from kvscribe.machine import hardware
from tests import media
from tests.conftest import EVAL_DIR, SAMPLE, SAMPLE_TEXT, run_cli

FOX = EVAL_DIR / "audioeval_kokoro_en_quick_brown_fox.wav"
HAS_CUDA = hardware.detect().has_cuda  # the bench's default --device auto picks CUDA if present
WORDS = ["ask", "not", "what", "your", "country", "can", "do", "for", "you"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
            st.lists(st.sampled_from(WORDS), max_size=12),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_pooled_wer_equals_jiwer(pairs):
    texts = [(" ".join(r), " ".join(h)) for r, h in pairs]
    expected = jiwer.wer([r for r, _ in texts], [h for _, h in texts])
    assert pooled_wer(texts) == pytest.approx(expected)


def test_identical_hypothesis_has_zero_wer():
    assert pooled_wer([(SAMPLE_TEXT, SAMPLE_TEXT), ("Hello, world.", "hello world")]) == 0.0


def test_policies_split_where_a_new_one_starts():
    assert split_policies(["full,sink=4,window=32,q8_0"]) == ["full", "sink=4,window=32,q8_0"]
    assert split_policies(["window=32,window=64", "q8_0"]) == ["window=32", "window=64", "q8_0"]
    with pytest.raises(UsageError):
        split_policies(["window=banana"])


def test_matrix_has_references_and_mirrored_baselines():
    cells = matrix(["transformers", "ctranslate2"], ["cpu-laptop"], ["q8_0"], [None], True)
    references = [c for c in cells if c.is_reference]
    assert {c.backend for c in references} == {"transformers", "ctranslate2"}
    assert Cell("kvscribe", "transformers", None, "cpu-laptop", "q8_0", "shared") in cells
    faster = next(c for c in cells if c.kind == "faster-whisper")
    assert mirror_of(faster, cells) == Cell("kvscribe", "ctranslate2", None, "cpu-laptop")
    batched = next(c for c in cells if c.kind == "faster-whisper-batched")
    assert mirror_of(batched, cells) == Cell("kvscribe", "ctranslate2", None, "cpu-laptop")
    assert not [c for c in cells if c.kind == "whisper-cli"]  # whispercpp not benched
    with pytest.raises(UsageError, match="transformers backend"):
        matrix(["ctranslate2"], ["cpu-laptop"], ["q8_0"], [None], False)


def test_manifest_reads_paths_texts_comments(tmp_path):
    (tmp_path / "ref.txt").write_text(SAMPLE_TEXT)
    manifest = tmp_path / "clips.tsv"
    manifest.write_text(
        f"# comment\naudio\treference\n{SAMPLE}\tref.txt\n{SAMPLE}\tliteral words\n"
    )
    clips = read_manifest(manifest)
    assert [c.reference for c in clips] == [SAMPLE_TEXT, "literal words"]
    assert clips[0].seconds == pytest.approx(11.0, abs=0.01)
    manifest.write_text(f"{SAMPLE}\n")
    with pytest.raises(UsageError, match="two tab-separated columns"):
        read_manifest(manifest)


def test_shipped_clips_include_one_longer_than_a_window():
    clips = shipped()
    assert clips[0].reference.startswith("And so my fellow Americans")
    assert max(c.seconds for c in clips) > 30


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory, whisper_cli):
    folder = tmp_path_factory.mktemp("bench")
    manifest = folder / "tiny.tsv"  # a 2.9 s clip: eleven cells each decode it twice
    manifest.write_text(f"{FOX}\t{FOX.with_suffix('.txt').read_text(encoding='utf-8')}")
    args = ["bench", "--manifest", manifest, "--profile", "cpu-laptop", "--baseline"]
    args += ["-b", "transformers", "-b", "ctranslate2", "-b", "whispercpp", "--policy", "q8_0"]
    args += ["--json", folder / "b.json", "--csv", folder / "b.csv"]
    args += ["--markdown", folder / "b.md", "--plot", folder / "plots"]
    result = run_cli(*args, timeout=900)
    return folder, result


@pytest.mark.slow
@pytest.mark.eval
def test_bench_writes_every_output(bench_run):
    folder, result = bench_run
    assert result.code == 0, result.stderr
    assert "kvscribe bench" in result.stderr and "Traceback" not in result.stderr
    data = json.loads((folder / "b.json").read_text())
    labels = [c["label"] for c in data["cells"]]
    assert len(labels) == 11 and len(data["claims"]) == 5
    assert data["claims"][4]["measured"].startswith("whisper.cpp Q8_0 self + cross: KV 5")
    rows = list(csv.DictReader((folder / "b.csv").open()))
    assert [r["label"] for r in rows] == labels
    markdown = (folder / "b.md").read_text()
    assert "## Seed claims" in markdown and all(label in markdown for label in labels)
    assert markdown.startswith("# kvscribe bench (MB = 10^6 bytes)")
    assert data["meta"]["device"].startswith("--device auto: ran on ")
    assert [r["device"] for r in rows] == [c["device"] for c in data["cells"]]
    for name in ("kv_vs_tokens.png", "wer_vs_kv.png"):
        assert (folder / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.eval
def test_bench_figures_agree_with_each_other(bench_run):
    folder, _ = bench_run
    cells = {c["label"]: c for c in json.loads((folder / "b.json").read_text())["cells"]}
    full = cells["transformers: full / full"]
    # transformers runs fp16 on CUDA; on the CPU bf16 where it has AMX, else fp32.
    cpu_dtype = "bfloat16" if hardware.cpu_multiplies_bfloat16() else "float32"
    dtype = "float16" if HAS_CUDA else cpu_dtype
    assert full["device"] == ("cuda" if HAS_CUDA else "cpu")
    assert full["settings"]["dtype"] == dtype
    # A full cache holds every position: its measured peak is the arithmetic full size.
    layers, d_model, beams, value_bytes = 4, 384, 5, 4 if dtype == "float32" else 2
    assert full["kv_cross_bytes"] == beams * layers * 2 * 1500 * d_model * value_bytes
    positions = max(seen for seen, _ in full["kv_trace"])
    assert full["kv_self_peak_bytes"] == positions * beams * layers * 2 * d_model * value_bytes
    assert full["wer_delta"] == 0 and full["kv_vs_full_pct"] == 100
    q8 = cells["transformers: q8_0 / shared"]
    # Q8_0: 34 bytes a block of 32 values, 27 % of a 4-byte cache, 53 % of a 2-byte one
    assert q8["kv_vs_full_pct"] < 30 * 4 / value_bytes and q8["kv_estimated"] is False
    pairs = [("faster-whisper", "ctranslate2"), ("faster-whisper-batched", "ctranslate2")]
    for baseline, mirror in [*pairs, ("whisper-cli", "whispercpp")]:
        base, ours = cells[f"{baseline}: cpu-laptop"], cells[f"{mirror}: cpu-laptop"]
        assert base["vs_kvscribe"] == pytest.approx(ours["seconds"] / base["seconds"], abs=1e-3)
    assert cells["ctranslate2: cpu-laptop"]["kv_estimated"] is True
    # whisper.cpp runs on the CPU only: under --device auto on a CUDA machine it says so.
    whisper = cells["whispercpp: cpu-laptop"]
    assert whisper["device"] == "cpu" and bool(whisper["device_note"]) == HAS_CUDA
    assert whisper["kv_provenance"] == {"self": "derived", "cross": "measured"}  # beam 5
    # The cache-type cells (kvscribe's whisper-cli): whisper.cpp's own cross-cache figure,
    # against F16's, is the Q8_0 / Q4_0 block size (34 or 18 bytes per 32 values) over 64.
    for kind, block in (("q8_0", 34), ("q4_0", 18)):
        quantized = cells[f"whispercpp: {kind} / shared,{kind}"]
        ratio = quantized["kv_cross_bytes"] / whisper["kv_cross_bytes"]
        assert ratio == pytest.approx(block / 64, abs=0.005)
    cross_only = cells["whispercpp: full / shared,q8_0"]
    assert cross_only["kv_self_peak_bytes"] == whisper["kv_self_peak_bytes"]
    for cell in cells.values():
        assert 0 <= cell["wer"] <= 0.2 and cell["peak_rss_bytes"] > 50_000_000


@pytest.mark.slow
@pytest.mark.eval
def test_charts_have_labelled_axes_and_legends(bench_run):
    from kvscribe.bench.figures import CellFigures
    from kvscribe.bench.plots import kv_figure, pyplot, wer_figure

    folder, _ = bench_run
    cells = json.loads((folder / "b.json").read_text())["cells"]
    figures = [CellFigures(**{**c, "kv_trace": [tuple(p) for p in c["kv_trace"]]}) for c in cells]
    plt = pyplot()
    for build, expected in ((kv_figure, "transformers: full / full"), (wer_figure, "whisper-cli")):
        chart = build(plt, figures)
        ax = chart.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(expected in text for text in legend), legend
        plt.close(chart)


# -- batch sizes: each policy at batch 1 / N, one trade-off table and chart --------------------


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


@pytest.mark.slow
def test_bench_without_batch_sizes_has_no_batch_rows(bench_run):
    folder, _ = bench_run
    data = json.loads((folder / "b.json").read_text())
    assert data["batch_tradeoff"] == []
    assert all(c["batch_size"] is None and ", batch" not in c["label"] for c in data["cells"])
    assert all(c["batch_size_run"] == 1 for c in data["cells"])  # an 11 s clip: no batch
    markdown = (folder / "b.md").read_text()
    assert "| batch |" in markdown and "Batch trade-off" not in markdown
    assert not (folder / "plots" / "batch_tradeoff.png").exists()


@pytest.fixture(scope="module")
def batch_bench(tmp_path_factory):
    """The shipped clip over a window (50 s: two speech chunks) at batch 1 and 4; the only
    clip, so each cell's warm-up is that clip alone (the suite's time)."""
    folder = tmp_path_factory.mktemp("batch-bench")
    long_clip = max(shipped(), key=lambda clip: clip.seconds)
    audio = (folder / long_clip.name).with_suffix(".wav")
    media.write_wav(audio, long_clip.audio)
    manifest = folder / "clips.tsv"
    manifest.write_text(f"{audio}\t{long_clip.reference}", encoding="utf-8")
    args = ["bench", "--manifest", manifest, "--profile", "cpu-laptop"]
    args += ["-b", "transformers", "-b", "ctranslate2"]
    args += ["--policy", "full", "--batch-sizes", "1,4", "--json", folder / "b.json"]
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
