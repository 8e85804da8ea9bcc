"""`kvscribe bench`: its parts, and one real run end to end on a tiny manifest whose
figures must agree with each other."""

from __future__ import annotations

import csv
import json

import jiwer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscribe.bench.cells import (
    Cell,
    matrix,
    mirror_of,
    split_policies,
)
from kvscribe.bench.clips import read_manifest, shipped
from kvscribe.bench.wer import pooled_wer
from kvscribe.errors import UsageError
from kvscribe.machine import hardware
from tests.conftest import CARDS, CARDS_TEXT, FOX, SAMPLE, SAMPLE_TEXT, run_cli

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
    with pytest.raises(UsageError) as bad:
        split_policies(["window=banana"])
    assert bad.value.subject == "--policy"  # bench's flag; it named transcribe's --kv-policy


def test_bench_checks_where_it_writes_before_it_measures(tmp_path):
    """An output it cannot write was found after the whole run (8 minutes and more)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    result = run_cli("bench", "-b", "ctranslate2", "--json", blocker / "x.json")
    assert result.code == 2 and "--json: cannot write under" in result.stderr, result.stderr
    assert "starting one process per cell" not in result.stderr


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
    """Eleven cells on a 2.9 s clip, without the warm-ups: the figures are checked against
    each other, not timed, and each cell's untimed first decode cost more than its timed one
    (20 of 50 CPU s). The default warm-up: test_bench_warms_up_every_cell_by_default."""
    folder = tmp_path_factory.mktemp("bench")
    manifest = folder / "tiny.tsv"  # a 2.9 s clip: eleven cells each decode it once
    manifest.write_text(f"{FOX}\t{FOX.with_suffix('.txt').read_text(encoding='utf-8')}")
    args = ["bench", "--manifest", manifest, "--profile", "cpu-laptop", "--no-warm-up"]
    args += ["--baseline"]
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
    # --no-warm-up, honoured by every kind of cell: none decoded anything before its run.
    assert data["meta"]["warm-up"].startswith("none (--no-warm-up)")
    assert all(c["warmed_up"] == [] for c in data["cells"]), data["cells"]
    for name in ("kv_vs_tokens.png", "wer_vs_kv.png"):
        assert (folder / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_warms_up_every_cell_by_default(tmp_path):
    """Without --no-warm-up each cell decodes the first clip once, untimed, before its timed
    run, and the report says so. One cell on the 1.1 s cards clip: the warm-up is the claim,
    not the figures (the eleven-cell run above has none, so they are not paid twice)."""
    manifest = tmp_path / "cards.tsv"
    manifest.write_text(f"{CARDS}\t{CARDS_TEXT}", encoding="utf-8")
    args = ["bench", "--manifest", manifest, "--profile", "cpu-laptop", "-b", "ctranslate2"]
    result = run_cli(*args, "--json", tmp_path / "b.json", "--markdown", tmp_path / "b.md")
    assert result.code == 0, result.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["meta"]["warm-up"] == "one untimed run per cell"
    assert [c["warmed_up"] for c in data["cells"]] == [[CARDS.name]], data["cells"]
    assert "- warm-up: one untimed run per cell" in (tmp_path / "b.md").read_text()


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


@pytest.mark.slow
def test_bench_without_batch_sizes_has_no_batch_rows(bench_run):
    folder, _ = bench_run
    data = json.loads((folder / "b.json").read_text())
    assert data["batch_tradeoff"] == []
    assert all(c["batch_size"] is None and ", batch" not in c["label"] for c in data["cells"])
    assert all(c["batch_size_run"] == 1 for c in data["cells"])  # a 2.9 s clip: no batch
    markdown = (folder / "b.md").read_text()
    assert "| batch |" in markdown and "Batch trade-off" not in markdown
    assert not (folder / "plots" / "batch_tradeoff.png").exists()
