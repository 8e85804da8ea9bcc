"""Does memory stay flat in a recording's length? Peak RSS of `kvscribe FILE -f txt` on a
1-minute and a 60-minute WAV (the eval clips concatenated), per backend and profile.

    .venv/bin/python benchmarks/long_memory.py [--minutes 1 --minutes 60] [--backend B]...
        [--profile P]... [--model M] [--resume] [--out DIR] [--name STEM] [--timeout S]
        [--cache-dir DIR]

Each cell runs `kvscribe FILE -f txt -o TMP -q --backend B --profile P --stats-json S` as a
child process. Its peak RSS comes from os.wait4 (ru_maxrss: the largest single process of
the tree, kvscribe or a reaped child such as whisper-cli); a 0.25 s /proc poll also sums the
whole tree's RSS (processes that run side by side), and kvscribe's own stats JSON adds its
peak, the engine's and any RSS samples over time. Every finished cell is saved at once to
benchmarks/results/long_memory.{json,md} (or --out DIR); --resume skips the cells there.
The inputs live in the kvscribe cache (bench-long/VERSION/), never in the repo.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import results_file

from kvscribe import paths
from kvscribe.machine import hardware

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
CLIPS_TSV = Path(__file__).resolve().parent / "eval_clips.tsv"
INPUTS_VERSION = "v1"  # bump when the recipe below changes: the cached WAVs are rebuilt
RATE, GAP_SECONDS, BLOCK_FRAMES = 16_000, 0.5, 65_536
BACKENDS = ["ctranslate2", "transformers", "whispercpp"]
PROFILES = ["cpu-laptop", "tiny-vram", "no-loss", "gpu", "auto"]
TARGET_RATIO = 1.10
POLL_SECONDS = 0.25
NAME = "long_memory"
MB = 1e6


def eval_clips() -> list[Path]:
    """The eval clips in benchmarks/eval_clips.tsv's order (paths relative to the list)."""
    clips = []
    for line in CLIPS_TSV.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith(("#", "audio\t")):
            clips.append((CLIPS_TSV.parent / line.split("\t")[0]).resolve())
    return clips


def long_wav(clips: list[Path], minutes: float, cache: Path) -> Path:
    """A `minutes`-long 16 kHz mono s16 WAV: the clips in order with 0.5 s of silence between,
    repeated and cut to length; built once per INPUTS_VERSION, a block at a time."""
    target = cache / INPUTS_VERSION / f"eval-clips-{minutes:g}min.wav"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    frames_left = round(minutes * 60 * RATE)
    silence = bytes(2 * round(GAP_SECONDS * RATE))
    partial = target.with_suffix(".wav.partial")
    with wave.open(str(partial), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        while frames_left > 0:
            for clip in clips:
                for block in (*_clip_blocks(clip), silence):
                    block = block[: 2 * frames_left]
                    out.writeframes(block)
                    frames_left -= len(block) // 2
                    if frames_left == 0:
                        break
                if frames_left == 0:
                    break
    partial.replace(target)  # a stopped build never leaves a short file under the real name
    return target


def _clip_blocks(clip: Path):
    with wave.open(str(clip), "rb") as source:
        shape = (source.getframerate(), source.getnchannels(), source.getsampwidth())
        if shape != (RATE, 1, 2):
            sys.exit(f"error: {clip}: {shape} (rate, channels, bytes); need 16 kHz mono s16")
        while block := source.readframes(BLOCK_FRAMES):
            yield block


def tree_rss_bytes(root: int) -> int:
    """Summed RSS of `root` and its live descendants, from /proc (0 where unreadable)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * page
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(rss.get(pid, 0) for pid in tree)


def run_measured(argv: list[str], log: Path, timeout: float | None) -> dict:
    """Run argv; its exit code, wall seconds, wait4 peak RSS and sampled tree-sum peak."""
    started = time.perf_counter()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    tree_peak, timed_out = 0, False
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, tree_rss_bytes(proc.pid))
            if timeout and time.perf_counter() - started > timeout and not timed_out:
                os.killpg(proc.pid, signal.SIGKILL)  # the whole session: whisper-cli too
                timed_out = True
            time.sleep(POLL_SECONDS)
    except BaseException:  # Ctrl-C or SIGTERM of the chain: its own session would outlive it
        os.killpg(proc.pid, signal.SIGKILL)
        os.wait4(proc.pid, 0)
        proc.returncode = -signal.SIGKILL
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {
        "exit": proc.returncode,
        "timed_out": timed_out,
        "wall_seconds": round(time.perf_counter() - started, 2),
        "peak_rss_wait4_bytes": usage.ru_maxrss * 1024,  # Linux: KiB
        "peak_rss_tree_sum_sampled_bytes": tree_peak or None,
    }


def stats_figures(path: Path) -> dict:
    """What kvscribe's stats JSON says about memory and time; keys it lacks are left out."""
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    keep = ("audio_seconds", "wall_seconds", "device", "notes", "settings", "model")
    found = {f"stats_{k}": stats[k] for k in keep if k in stats}
    files = stats.get("files") or [{}]
    for source in (files[0], stats):  # memory keys may sit per file or at the top
        for key, value in source.items():
            if "rss" in key or key == "memory_samples":
                found[f"stats_{key}"] = value
    return found


def error_line(log: Path) -> str | None:
    """The one-line error kvscribe printed (else its last line), for a cell that failed."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [None])[-1]


def measure_cell(wav: Path, backend: str, profile: str, args, work: Path) -> dict:
    out, stats, log = work / "out", work / "stats.json", work / "log.txt"
    argv = [str(KVSCRIBE), str(wav), "-f", "txt", "-o", str(out), "-q"]
    # "cpu-laptop+batch1": the profile with --batch-size 1 (rows decoded at once bound the
    # memory of the batched paths, so a batch is measured apart from the length);
    # "cpu-laptop+unprompted": with --no-condition-on-previous-text (chunks in order,
    # none prompted: what a prompted row's cache holds, measured apart)
    name, unprompted, rest = profile.partition("+unprompted")
    name, _, batch = (name + rest).partition("+batch")
    argv += ["--backend", backend, "--profile", name, "--stats-json", str(stats)]
    if batch:
        argv += ["--batch-size", batch]
    if unprompted:
        argv += ["--no-condition-on-previous-text"]
    if args.model:
        argv += ["--model", args.model]
    row = {"backend": backend, "profile": profile, "minutes": args.current_minutes}
    row["argv"] = ["kvscribe", *(a.replace(str(work), "TMP") for a in argv[1:])]
    row.update(run_measured(argv, log, args.timeout))
    row.update(stats_figures(stats))
    if row["exit"] != 0:
        row["error"] = "timed out" if row["timed_out"] else error_line(log)
    transcript = out / f"{wav.stem}.txt"
    row["transcript_words"] = len(transcript.read_text().split()) if transcript.exists() else None
    return row


def cell_key(row: dict) -> tuple:
    return row["backend"], row["profile"], float(row["minutes"])


def mb(value) -> str:
    return f"{value / MB:,.0f}" if value else "-"


def markdown(rows: list[dict], minutes: list[float], meta: dict) -> str:
    long = max(minutes)
    by_key = {cell_key(r): r for r in rows}
    lengths = " | ".join(f"peak RSS {m:g} min (MB)" for m in minutes)
    walls = " | ".join(f"wall {m:g} min (s)" for m in minutes)
    shorter = [m for m in minutes if m != long]
    ratios = " | ".join(f"ratio {long:g}/{m:g}" for m in shorter)
    tree_ratios = " | ".join(f"ratio {long:g}/{m:g} (tree sum)" for m in shorter)
    lines = [
        f"Model {meta['model']}; {meta['ram_gb']:.1f} GB RAM; {meta['device']}. Inputs: the eval",
        "clips concatenated (0.5 s silence between, repeated, cut to length), 16 kHz mono s16.",
        "Peak RSS: os.wait4's ru_maxrss of the `kvscribe` process tree (its largest single",
        "process; whisper-cli included). MB = 10^6 bytes.",
        f"Ratio: the {long:g}-min peak over each shorter one's; target <= {TARGET_RATIO:.2f}.",
        "Ratio (tree sum): the same for the tree's summed RSS (below), which counts kvscribe",
        "and whisper-cli together. `+batchN`: the profile run with --batch-size N; "
        "`+unprompted`: with --no-condition-on-previous-text.",
        "",
        f"| backend | profile | {lengths} | {ratios} | {tree_ratios} | {walls} | note |",
        "|---|---|" + "---|" * (len(minutes) + 2 * len(shorter) + len(minutes) + 1),
    ]
    pairs = list(dict.fromkeys((r["backend"], r["profile"]) for r in rows))
    for backend, profile in pairs:
        cells = [by_key.get((backend, profile, float(m))) for m in minutes]
        peaks = [c["peak_rss_wait4_bytes"] if c and c["exit"] == 0 else None for c in cells]
        high = by_key.get((backend, profile, long))
        lows = [by_key.get((backend, profile, float(m))) for m in shorter]
        ratio = " | ".join(_ratio(low, high, "peak_rss_wait4_bytes") for low in lows)
        tree_ratio = " | ".join(
            _ratio(low, high, "peak_rss_tree_sum_sampled_bytes") for low in lows
        )
        note = "; ".join(dict.fromkeys(_note(c) for c in cells if c and _note(c)))
        lines.append(
            f"| {backend} | {profile} | {' | '.join(mb(p) for p in peaks)} | {ratio} "
            f"| {tree_ratio} | "
            + " | ".join(f"{c['wall_seconds']:.1f}" if c else "-" for c in cells)
            + f" | {note} |"
        )
    lines += ["", *_detail_table(rows)]
    return "\n".join(lines)


def _ratio(low: dict | None, high: dict | None, key: str) -> str:
    """The long run's figure over the short run's, against the target ('-' if either failed)."""
    if not (low and high and low["exit"] == 0 == high["exit"] and low[key] and high[key]):
        return "-"
    value = high[key] / low[key]
    return f"{value:.2f} ({'ok' if value <= TARGET_RATIO else 'over'})"


def _note(cell: dict) -> str:
    """A failed run's exit and error, or the notes kvscribe made (e.g. a device fallback);
    without the length, so the same line for every length shows once."""
    if cell.get("error"):
        return f"exit {cell['exit']}: {cell['error']}"
    return " ".join(cell.get("stats_notes") or [])


def _detail_table(rows: list[dict]) -> list[str]:
    lines = [
        "Per run, kvscribe's own figures (stats JSON) beside the OS's: tree sum = RSS of all",
        "the tree's processes added up, polled every 0.25 s (kvscribe and whisper-cli run",
        "side by side); start / warm / end = RSS samples of the run, where the stats have them.",
        "",
        "| backend | profile | min | device | audio (s) | wait4 peak | tree sum | kvscribe peak "
        "| engine peak | start / warm / end (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        samples = [r.get(f"stats_rss_{k}_bytes") for k in ("start", "after_warmup", "end")]
        trace = " / ".join(mb(s) for s in samples) if any(samples) else "-"
        lines.append(
            f"| {r['backend']} | {r['profile']} | {r['minutes']:g} | {r.get('stats_device', '-')} "
            f"| {r.get('stats_audio_seconds', '-')} | {mb(r['peak_rss_wait4_bytes'])} "
            f"| {mb(r['peak_rss_tree_sum_sampled_bytes'])} | {mb(r.get('stats_peak_rss_bytes'))} "
            f"| {mb(r.get('stats_engine_peak_rss_bytes'))} | {trace} |"
        )
    return lines


def ram_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def load_previous(path: Path) -> tuple[list[dict], list[str]]:
    """Rows and earlier commands of an existing result file (for --resume)."""
    if not path.exists():
        return [], []
    saved = json.loads(path.read_text(encoding="utf-8"))
    meta = saved.get("meta", {})
    return saved.get("rows", []), [*meta.get("earlier_commands", []), meta.get("command")]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, action="append", help="input lengths (1, 60)")
    parser.add_argument("--backend", action="append", help=f"default: {' '.join(BACKENDS)}")
    parser.add_argument("--profile", action="append", help=f"default: {' '.join(PROFILES)}")
    parser.add_argument("--model", help="default: kvscribe's (tiny.en, embedded)")
    parser.add_argument("--resume", action="store_true", help="skip cells already saved")
    parser.add_argument("--out", type=Path, help="results folder (default benchmarks/results)")
    parser.add_argument("--name", default=NAME, help=f"result file stem (default {NAME})")
    parser.add_argument("--timeout", type=float, help="seconds per run before it is killed")
    parser.add_argument(
        "--cache-dir", type=Path, help="inputs (default <kvscribe cache>/bench-long)"
    )
    args = parser.parse_args()
    args.minutes = sorted(set(args.minutes or [1.0, 60.0]))
    if len(args.minutes) < 2 or args.minutes[0] <= 0:
        parser.error("--minutes: give two or more positive lengths, e.g. --minutes 1 --minutes 3")
    args.backend = args.backend or BACKENDS
    args.profile = args.profile or PROFILES
    return args


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # runs cleanup
    if args.out:
        results_file.OUT = args.out
    cache = args.cache_dir or paths.cache_dir() / "bench-long"
    clips = eval_clips()
    wavs = {m: long_wav(clips, m, cache) for m in args.minutes}
    rows, earlier = (
        load_previous(results_file.OUT / f"{args.name}.json") if args.resume else ([], [])
    )
    done = {cell_key(r) for r in rows}
    found = hardware.detect()
    meta = {
        "device": found.describe() if found.has_cuda else "cpu (no CUDA device)",
        "model": args.model or "tiny.en (kvscribe's default, embedded)",
        "ram_gb": round(ram_gb(), 1),
        "inputs": {f"{m:g} min": str(wavs[m]) for m in args.minutes},
        "inputs_recipe": f"{INPUTS_VERSION}: {CLIPS_TSV.name} order, {GAP_SECONDS} s gaps",
        "peak_rss": "os.wait4 ru_maxrss of the kvscribe tree (largest single process), bytes",
        "target_ratio": TARGET_RATIO,
        "earlier_commands": [c for c in earlier if c],
    }
    for backend in args.backend:
        for profile in args.profile:
            for minutes in args.minutes:
                if (backend, profile, minutes) in done:
                    continue
                args.current_minutes = minutes
                with tempfile.TemporaryDirectory(prefix="kvscribe-long-") as work:
                    row = measure_cell(wavs[minutes], backend, profile, args, Path(work))
                print(
                    f"{backend} {profile} {minutes:g} min: exit {row['exit']}, "
                    f"{row['wall_seconds']:.1f} s, peak RSS {mb(row['peak_rss_wait4_bytes'])} MB"
                    + (f" ({row['error']})" if row.get("error") else ""),
                    flush=True,
                )
                rows.append(row)
                results_file.write(args.name, meta, rows, markdown(rows, args.minutes, meta))
    results_file.write(args.name, meta, rows, markdown(rows, args.minutes, meta))
    print("\n" + (results_file.OUT / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
