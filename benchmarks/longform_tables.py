"""The tables of benchmarks/longform_peers.py: one row per clip and configuration from the
runs, each row's time against faster-whisper's BatchedInferencePipeline on the same clip,
and the markdown its result file holds."""

from __future__ import annotations

import statistics

BASELINE = "fw-batched"


def summarise(clips: list, configs: list[str], runs: list[dict]) -> list[dict]:
    """One row per clip and configuration: every run's seconds, their median, the first
    successful run's WER and text, and whether the runs' texts agreed."""
    rows = []
    for clip in clips:
        for config in configs:
            mine = [r for r in runs if r["clip"] == clip.name and r["config"] == config]
            good = [r for r in mine if "text" in r]
            rows.append(
                {
                    "clip": clip.name,
                    "config": config,
                    "audio_seconds": clip.seconds,
                    "runs_seconds": [r["seconds"] for r in good],
                    "failed_runs": len(mine) - len(good),
                    "median_seconds": statistics.median(r["seconds"] for r in good)
                    if good
                    else None,
                    "median_peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in good)
                    if good
                    else None,
                    "wer": good[0]["wer"] if good else None,
                    **_median_run_figures(good),
                    "texts_identical": len({r["text"] for r in good}) <= 1,
                    "text": good[0]["text"] if good else None,
                }
            )
    _add_ratios(rows)
    return rows


def _median_run_figures(good: list[dict]) -> dict:
    """The run of median seconds' time by stage and cores busy (kvscribe's runs only)."""
    if not good or good[0].get("cores_busy") is None:
        return {}
    ordered = sorted(good, key=lambda r: r["seconds"])
    middle = ordered[(len(ordered) - 1) // 2]
    return {"stage_seconds": middle.get("stage_seconds"), "cores_busy": middle["cores_busy"]}


def stages_markdown(rows: list[dict]) -> list[str]:
    """Where kvscribe's time went, per clip and configuration (the median run's)."""
    timed = [r for r in rows if r.get("cores_busy") is not None]
    if not timed:
        return []
    names = list(dict.fromkeys(k for r in timed for k in (r.get("stage_seconds") or {})))
    lines = [
        "",
        "kvscribe's time by stage (s, the median run's `--stats-json`; the rest of the process: "
        "start-up, model load, output) and cores busy (CPU seconds over wall seconds times cores):",
        "",
        "| " + " | ".join(["clip", "config", *names, "cores busy"]) + " |",
        "|" + "---|" * (len(names) + 3),
    ]
    for r in timed:
        stages = r.get("stage_seconds") or {}
        cells = [r["clip"], r["config"], *(_cell(stages.get(n), ".2f") for n in names)]
        lines.append("| " + " | ".join([*cells, f"{r['cores_busy']:.0%}"]) + " |")
    return lines


def _add_ratios(rows: list[dict]) -> None:
    """Each row's median over fw-batched's on the same clip (when both were measured)."""
    base = {r["clip"]: r["median_seconds"] for r in rows if r["config"] == BASELINE}
    for row in rows:
        ref = base.get(row["clip"])
        row["x_fw_batched"] = row["median_seconds"] / ref if ref and row["median_seconds"] else None


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _transformers_default() -> str:
    """The transformers backend's default compute type on this CPU (backends/transformers/)."""
    from kvscribe.machine import hardware

    return "bfloat16" if hardware.cpu_multiplies_bfloat16() else "float32"


def markdown(rows: list[dict], pooled: list[dict], repeat: int, threads: int) -> str:
    lines = [
        f"Whole processes, {repeat} interleaved run(s) each, {threads} CPU threads, beam 5 "
        "unless a config says otherwise. Every engine's weights are the same CTranslate2 model "
        "files' (float16; the transformers backend reads a conversion of them): ctranslate2 "
        "computes in int8 unless a config says float32, "
        "kvscribe-transformers in its default compute type "
        f"({_transformers_default()} on this CPU).",
        "",
        "| clip | config | median s | runs | WER | x fw-batched time | peak RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        runs = ", ".join(f"{s:.2f}" for s in r["runs_seconds"])
        if r["failed_runs"]:
            runs += f" ({r['failed_runs']} failed)"
        lines.append(
            f"| {r['clip']} ({r['audio_seconds']:.1f} s) | {r['config']} | "
            f"{_cell(r['median_seconds'], '.2f')} | {runs} | {_cell(r['wer'], '.3f')} | "
            f"{_cell(r['x_fw_batched'], '.2f')} | {_cell(r['median_peak_rss_mb'], '.0f')} |"
        )
    if pooled:
        lines += [
            "",
            f"Pooled over the English clips ({', '.join(pooled[0]['clips'])}):",
            "",
            "| config | pooled WER | sum of median s |",
            "|---|---|---|",
        ]
        lines += [
            f"| {p['config']} | {p['pooled_wer']:.3f} | {p['median_seconds_total']:.2f} |"
            for p in pooled
        ]
    return "\n".join(lines + stages_markdown(rows))
