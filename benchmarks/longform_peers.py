"""kvscribe's CLI against faster-whisper called directly, on long recordings, each run a whole
process as a user would start it (interpreter start, imports, model load, decode, output).

    .venv/bin/python benchmarks/longform_peers.py [--repeat 3] [--clips A,B] [--configs X,Y]
        [--threads 2] [--out longform_peers] [--made DIR]

With --made DIR, recordings made by eval/realform/make_asterisk.py into DIR join the clips.
Each run also counts the reference words lost in runs of five or more (`lost_in_runs`), and
kvscribe's runs keep their `--stats-json` time by stage and cores busy (a table of the
median run's).

Configurations (CONFIGS, in benchmarks/longform_configs.py):
- fw-sequential: benchmarks/peers/faster_whisper_cli.py --mode sequential
  (WhisperModel.transcribe: 30 s windows, previous-text prompts), int8, beam 5.
- fw-batched: the same script --mode batched (BatchedInferencePipeline, batch 8, beam 5).
- fw-batched-words: the same with --word-timestamps (every word timed, as kvscribe's
  batched default times every word to cut its segments).
- kvscribe-default: `kvscribe AUDIO -f txt` (profile auto = cpu-laptop on CPU: ctranslate2
  int8, beam 5, batch 8 on files over 30 s).
- kvscribe-batch1: the same with --batch-size 1 (sequential, previous-text prompts).
- kvscribe-batch1-words: --batch-size 1 with --word-timestamps (each window's words aligned).
- kvscribe-batch4: the same with --batch-size 4 (a file of 5 to 8 speech chunks takes two
  rounds of lanes instead of one, half its chunks prompted: kvscribe/chunk_rounds.py).
- kvscribe-batch2: the same with --batch-size 2 (two chunks at a time, each span of six
  in two lanes of three: two thirds of the chunks prompted, every chunk aligned and its
  skipped stretches read again, as the default's).
- kvscribe-default-srt: the default writing SRT (`-f srt`) instead of plain text.
- kvscribe-default-beam3, kvscribe-default-beam4: the default at beam 3 or 4.
- fw-batched-avx512, kvscribe-default-avx512: either with CT2_FORCE_CPU_ISA=AVX512.
- kvscribe-default-ct2-encoder, kvscribe-batch1-ct2-encoder: either with CTranslate2's
  own encoder (a profile with `[ctranslate2] encoder = "ctranslate2"`) instead of the one
  `encoder = "auto"` measured faster on the machine.
- kvscribe-transformers: the same with --backend transformers (its default compute type:
  bfloat16 on CPUs with AMX, else float32; batch 8); kvscribe-transformers-float32 with
  --compute-type float32.
- kvscribe-transformers-int8: the same with --compute-type int8 (int8 linear layers).
- kvscribe-onnx, kvscribe-onnx-int8: --backend onnx on the float32 or int8 graphs (run
  `kvscribe setup onnx --compute-type int8` first), the profile's batching;
  kvscribe-onnx-int8-batch1: int8 with --batch-size 1 (windows in sequence).
- kvscribe-default-glibc-arenas, kvscribe-batch1-glibc-arenas: with glibc's own limit of
  malloc arenas instead of the command's two.
- kvscribe-default-full-exit, kvscribe-transformers-full-exit: the same command ending
  with Python's full teardown instead of its quick exit.
- kvscribe-float32: the ctranslate2 backend with --compute-type float32;
  kvscribe-float32-beam4/-beam6 and kvscribe-transformers-float32-beam4/-beam6: either
  engine in float32 with --beam-size 4 or 6.

Both engines read the same CTranslate2 model folder (kvscribe.models.resolve), and every
process gets `--threads` CPU threads (faster-whisper's cpu_threads, kvscribe's --threads).
English clips run tiny.en, French and Spanish base with --language. Runs are interleaved
(each repeat, each clip, every configuration, the order rotated by one each time) so drift
of the machine falls on all alike; the table gives medians. Seconds are
time.perf_counter() around the whole process, so start-up and model loading count, as
they do for a user; peak RSS is each process's own (os.wait4's ru_maxrss). WER: English through
kvscribe.bench.wer (Whisper's English normaliser);
French and Spanish through Whisper's basic normaliser with diacritics removed (the Spanish
references are written without accents). kvscribe's bytecode is written first, as an
install writes it, and each kvscribe configuration runs once untimed per model on
samples/jfk.wav, so the one-off work of a user's first run (the encoder graph written and
the encoders timed into the cache) is not timed. Writes benchmarks/results/OUT.json (every run's
seconds, WER and text) and OUT.md (the printed tables).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import results_file
from longform_configs import CONFIGS, FULL_EXIT, environment_of
from longform_tables import markdown, summarise

from kvscribe import models
from kvscribe.bench.wer import edit_distance, pooled_wer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from tests.bytecode import compile_kvscribe  # noqa: E402

EVAL = HERE.parent / "eval"
PEER = HERE / "peers" / "faster_whisper_cli.py"
# The kvscribe of the interpreter running this script, so both peers share one environment.
KVSCRIBE = str(Path(sys.executable).parent / "kvscribe")


@dataclass(frozen=True)
class Clip:
    name: str
    path: Path
    model: str
    language: str  # for the WER's normaliser; passed to the engines only when not English

    @property
    def seconds(self) -> float:
        with wave.open(str(self.path)) as w:
            return w.getnframes() / w.getframerate()


CLIPS = [
    Clip("espeak_longform_en", EVAL / "clips" / "espeak_longform_en.wav", "tiny.en", "en"),
    Clip("asterisk_en_ivr_dev", EVAL / "realform" / "asterisk_en_ivr_dev.wav", "tiny.en", "en"),
    Clip(
        "asterisk_en_ivr_dev_noisy",
        EVAL / "realform" / "asterisk_en_ivr_dev_noisy.wav",
        "tiny.en",
        "en",
    ),
    Clip("asterisk_fr_ivr_dev", EVAL / "realform" / "asterisk_fr_ivr_dev.wav", "base", "fr"),
    Clip("asterisk_es_ivr_dev", EVAL / "realform" / "asterisk_es_ivr_dev.wav", "base", "es"),
    Clip("joined_real", EVAL / "clips_joined" / "joined_real.wav", "tiny.en", "en"),
]
_MODELS = {"en": "tiny.en", "fr": "base", "es": "base", "it": "base", "ru": "base"}


def made_clips(folder: Path) -> list[Clip]:
    """Recordings of the realform kind made outside the repository (`python
    eval/realform/make_asterisk.py SOUNDS DOCS FOLDER holdout`): asterisk_LANG_*.wav."""
    found = sorted(folder.glob("asterisk_*.wav"))
    if not found:
        sys.exit(f"no asterisk_*.wav recordings in {folder} (see eval/realform/make_asterisk.py)")
    return [Clip(p.stem, p, _MODELS[p.stem.split("_")[1]], p.stem.split("_")[1]) for p in found]


def warm_cache(clips: list[Clip], configs: list[str], threads: int) -> None:
    """One untimed run per model and configuration on a short clip, so the one-off work a
    user's first run does (the encoder graph written, the encoders timed) is not timed."""
    short = EVAL.parent / "samples" / "jfk.wav"
    for model in sorted({clip.model for clip in clips}):
        for config in configs:
            if CONFIGS[config][0] != "fw":
                clip = Clip("warm-up", short, model, "en")
                argv = command(config, clip, threads)
                _run_process(argv, os.environ | environment_of(config))


def command(config: str, clip: Clip, threads: int) -> list[str]:
    """The command line a user would type for this configuration and clip."""
    engine, flags = CONFIGS[config]
    language = [] if clip.language == "en" else ["--language", clip.language]
    shared = ["--threads", str(threads), *flags, *language]
    if engine == "fw":
        model_dir = str(models.resolve(clip.model, ("ctranslate2",)).path)
        peer = [sys.executable, str(PEER), str(clip.path), "--model-dir", model_dir]
        return [*peer, "--beam-size", "5", *shared]
    kvscribe = [sys.executable, "-c", FULL_EXIT] if engine == "kvscribe-full-exit" else [KVSCRIBE]
    output = [] if "-f" in flags else ["-f", "txt"]
    return [*kvscribe, str(clip.path), "--model", clip.model, *output, "-q", *shared]


def text_of(config: str, stdout: str) -> str:
    """The transcript in a process's output: the peer prints start, end and text per line,
    kvscribe's txt output is the text wrapped over lines."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if CONFIGS[config][0] == "fw":
        lines = [line.split("\t", 2)[2] for line in lines]
    if "srt" in CONFIGS[config][1]:  # cue numbers and times left out
        lines = [line for line in lines if not line.strip().isdigit() and "-->" not in line]
    return " ".join(line.strip() for line in lines)


def timed_run(config: str, clip: Clip, threads: int, base: dict | None = None) -> dict:
    """One whole process, timed from before its start to after its exit, with its peak
    resident memory; `base`: the environment it starts from (default os.environ)."""
    argv = command(config, clip, threads)
    environment = (os.environ if base is None else base) | environment_of(config)
    with tempfile.TemporaryDirectory() as folder:
        stats = Path(folder) / "stats.json"
        if CONFIGS[config][0] != "fw":  # kvscribe's own figures: time by stage, cores busy
            argv = [*argv, "--stats-json", str(stats)]
        returncode, stdout, stderr, seconds, peak_rss = _run_process(argv, environment)
        figures = json.loads(stats.read_text()) if stats.is_file() else {}
    run = {"clip": clip.name, "config": config, "seconds": seconds, "returncode": returncode}
    run["peak_rss_mb"] = peak_rss
    run["stage_seconds"] = figures.get("stage_seconds")
    run["cores_busy"] = figures.get("cores_busy")
    if returncode:
        run["error"] = stderr[-2000:]
        return run
    run["text"] = text_of(config, stdout)
    run["wer"] = wer(clip, [run["text"]])
    run["lost_in_runs"] = lost_in_runs(reference(clip), run["text"])
    return run


def lost_in_runs(reference_text: str, hypothesis: str, shortest: int = 5) -> int:
    """Reference words missing in runs of `shortest` or more in a row (basic normaliser): a
    phrase dropped whole, which a WER averages away."""
    import jiwer

    normal = _basic_normalizer()
    alignment = jiwer.process_words(normal(reference_text), normal(hypothesis))
    runs = (c.ref_end_idx - c.ref_start_idx for c in alignment.alignments[0] if c.type == "delete")
    return sum(n for n in runs if n >= shortest)


def _run_process(argv: list[str], environment: dict) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, wall seconds, peak RSS in MB = 10^6 bytes) of one process:
    its output goes to temporary files so the child can be reaped with os.wait4, whose
    resource usage is that process's own (ru_maxrss, KiB on Linux)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        child = subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, env=environment
        )
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return child.returncode, out.read(), err.read(), seconds, usage.ru_maxrss * 1024 / 1e6


@cache
def _basic_normalizer():
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer(remove_diacritics=True)


def wer(clip: Clip, hypotheses: list[str], clips: list[Clip] | None = None) -> float:
    """Errors over reference words for `clip` (or, with `clips`, pooled over several of one
    language): Whisper's English normaliser for English, its basic one otherwise, since the
    English one would rewrite French and Spanish words as English spellings."""
    clips = clips or [clip]
    pairs = [(reference(c), h) for c, h in zip(clips, hypotheses, strict=True)]
    if clip.language == "en":
        return pooled_wer(pairs)
    normal = _basic_normalizer()
    errors = sum(edit_distance(normal(r).split(), normal(h).split()) for r, h in pairs)
    return errors / max(1, sum(len(normal(r).split()) for r, _ in pairs))


def reference(clip: Clip) -> str:
    return clip.path.with_suffix(".txt").read_text(encoding="utf-8")


def rotated(configs: list[str], turn: int) -> list[str]:
    """The configurations starting at a different one each turn, so none always runs first
    (colder caches) or right after the same neighbour."""
    shift = turn % len(configs)
    return configs[shift:] + configs[:shift]


def measure(clips: list[Clip], configs: list[str], repeat: int, threads: int) -> list[dict]:
    """Every run, interleaved: each repeat, each clip, every configuration in rotated order."""
    runs, turn = [], 0
    for round_ in range(repeat):
        for clip in clips:
            for position, config in enumerate(rotated(configs, turn)):
                run = timed_run(config, clip, threads)
                run.update(repeat=round_, position=position)
                runs.append(run)
                _progress(run)
            turn += 1
    return runs


def _progress(run: dict) -> None:
    got = (
        f"WER {run['wer']:.3f}, {run['lost_in_runs']} words lost in runs of 5+"
        if "wer" in run
        else f"FAILED rc {run['returncode']}"
    )
    print(f"  {run['clip']} {run['config']}: {run['seconds']:.2f} s, {got}", file=sys.stderr)


def pooled_english(clips: list[Clip], configs: list[str], rows: list[dict]) -> list[dict]:
    """Per configuration, WER pooled over the English clips and their total median time."""
    english = [c for c in clips if c.language == "en"]
    pooled = []
    for config in configs:
        got = {r["clip"]: r for r in rows if r["config"] == config and r["text"] is not None}
        if not english or any(c.name not in got for c in english):
            continue
        texts = [got[c.name]["text"] for c in english]
        pooled.append(
            {
                "config": config,
                "clips": [c.name for c in english],
                "pooled_wer": wer(english[0], texts, english),
                "median_seconds_total": sum(got[c.name]["median_seconds"] for c in english),
            }
        )
    return pooled


def _shown(argv: list[str]) -> str:
    """A command as the results file shows it: paths relative to the repository."""
    return " ".join(argv).replace(f"{EVAL.parent}/", "")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _where(path: Path) -> str:
    """A clip's path from the repository root, or where it was made outside it."""
    try:
        return str(path.relative_to(EVAL.parent))
    except ValueError:
        return f"{path} (made by eval/realform/make_asterisk.py, not in the repository)"


def _names(text: str | None, known: list[str], what: str) -> list[str]:
    """A comma-separated subset of `known`, kept in `known`'s order."""
    if not text:
        return known
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        sys.exit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return [n for n in known if n in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clips", help="comma-separated clip names (default: all)")
    parser.add_argument("--configs", help="comma-separated configurations (default: all)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for every engine")
    parser.add_argument("--out", default="longform_peers", help="result file stem")
    parser.add_argument(
        "--made", type=Path, help="also the asterisk_*.wav recordings made into this folder"
    )
    args = parser.parse_args()
    known = CLIPS + (made_clips(args.made) if args.made else [])
    names = _names(args.clips, [c.name for c in known], "clips")
    clips = [c for c in known if c.name in names]
    configs = _names(args.configs, list(CONFIGS), "configs")
    compile_kvscribe()  # as `pip install` does (tests/bytecode.py)
    warm_cache(clips, configs, args.threads)
    runs = measure(clips, configs, args.repeat, args.threads)
    rows = summarise(clips, configs, runs)
    pooled = pooled_english(clips, configs, rows)
    table = markdown(rows, pooled, args.repeat, args.threads)
    print(table)
    meta = {
        "device": "cpu",
        "repeat": args.repeat,
        "threads": args.threads,
        "beam_size": 5,
        "clips": {
            c.name: {
                "file": _where(c.path),
                "seconds": c.seconds,
                "model": c.model,
                "language": c.language,
            }
            for c in clips
        },
        "configs": {name: _shown(command(name, clips[0], args.threads)) for name in configs},
        "versions": {p: _version(p) for p in ("kvscribe", "faster-whisper", "ctranslate2")},
        "timing": "time.perf_counter() around the whole process (start-up, imports, model "
        "load, decode, output); configurations interleaved, rotated per clip",
        "memory": "peak_rss_mb: the process's own ru_maxrss (os.wait4), MB = 10^6 bytes",
        "units": "seconds: wall clock; bytes: MB = 10^6 bytes; WER: per clip, English after "
        "Whisper's English normaliser, French and Spanish after its basic one",
        "wer": "English: kvscribe.bench.wer (Whisper's English normaliser); fr/es: "
        "whisper_normalizer BasicTextNormalizer(remove_diacritics=True); per row: the first "
        "run's text",
        "pooled": pooled,
        "runs": runs,
    }
    results_file.write(args.out, meta, rows, table)


if __name__ == "__main__":
    main()
