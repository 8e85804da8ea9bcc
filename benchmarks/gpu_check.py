"""The GPU rows of the seed table, measured on one lent GPU within a few minutes: the
transformers backend under the gpu and tiny-vram profiles and each KV policy, and
whisper.cpp's F16 / Q8_0 / Q4_0 caches, on long-form speech.

    python benchmarks/gpu_check.py [--device cuda] [--minutes 7] [--name gpu_check]
    python benchmarks/gpu_check.py --device cpu --quick --out DIR   # the dry run (tests)

On the device, `benchmarks/gpu_check.sh` sets up what it needs from the carried files
(docs/gpu_check.md) and runs this. Cells run in order of importance until the deadline
(`--minutes`); the result file lists the cells left unrun:

1. transformers, each profile as shipped (its policy, beams and batch), batch 1 and the
   profile's batch, on the espeak long-form clip and the realform telephone recording,
   float16 (float32 on a CPU);
2. each KV policy (full, window, sink + window, half layers, Q8_0, Q4_0, shared cross) with
   the gpu profile's beams at its batch on the realform recording, then at batch 1 on the
   espeak clip;
3. whisper.cpp (`--whisper-cli`, or KVSCRIBE_WHISPER_CLI; built with CUDA on the device,
   and run on it: the backend's use_gpu): F16, Q8_0 and Q4_0 self and cross caches with
   flash attention, on the espeak clip;
4. the profiles as shipped in bfloat16.

Each transformers cell is timed after an untimed run of the same recording.

Per cell: wall seconds, ms per decoded token, pooled WER, the decoder KV held (self peak +
cross, measured from the cache's storage; whisper.cpp: as it prints them) and, on CUDA,
torch.cuda.max_memory_allocated. Writes NAME.json and NAME.md into benchmarks/results (or
--out).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

from kvscribe import profile, registry  # noqa: E402
from kvscribe.bench.wer import pooled_wer  # noqa: E402
from kvscribe.contract import DecodeRequest  # noqa: E402

SAMPLE_RATE = 16_000  # Whisper's
ESPEAK = ROOT / "eval" / "clips" / "espeak_longform_en.wav"
REALFORM = ROOT / "eval" / "realform" / "asterisk_en_ivr_dev.wav"
# The dry run's recording: real speech of different texts joined, past one window (34.7 s).
QUICK = ROOT / "samples" / "jfk.wav"
QUICK_PARTS = (
    QUICK,
    *(
        ROOT / "eval" / "clips" / f"ps_librivox_ss01_{n}.wav"
        for n in ("0870", "0890", "0920", "0930")
    ),
)
POLICIES = (
    "full|full",
    "window=256|full",
    "sink=4,window=256|full",
    "full; half@layers=odd|full",
    "q8_0|full",
    "q4_0|full",
    "full|shared",
    "sink=4,window=128,q8_0|shared,q8_0",
)
WHISPER_CPP_CACHES = ("f16", "q8_0", "q4_0")


@dataclasses.dataclass(frozen=True)
class Cell:
    section: str
    profile: str
    policy: str | None  # None: the profile's own
    batch: int | None  # None: the profile's
    recording: Path
    dtype: str

    def label(self) -> str:
        policy = self.policy or "profile's"
        batch = "profile's" if self.batch is None else self.batch
        return f"{self.profile} / {policy} / batch {batch} / {self.recording.stem} / {self.dtype}"


def cells(device: str, quick: bool) -> list[Cell]:
    """The transformers cells, most important first."""
    half = "float16" if device == "cuda" else "float32"
    if quick:  # each section's path once, the batched and the sequential
        return [
            Cell("profiles", "gpu", None, None, QUICK, half),
            Cell("profiles", "tiny-vram", None, 1, QUICK, half),
            Cell("policies", "gpu", "q4_0|full", 2, QUICK, half),
        ]
    ordered = [
        Cell("profiles", name, None, batch, recording, half)
        for name in ("gpu", "tiny-vram")
        for batch in (None, 1)
        for recording in (REALFORM, ESPEAK)
    ]
    ordered += [Cell("policies", "gpu", p, None, REALFORM, half) for p in POLICIES]
    ordered += [Cell("policies", "gpu", p, 1, ESPEAK, half) for p in POLICIES]
    if device == "cuda":
        ordered += [
            Cell("bfloat16", name, None, batch, REALFORM, "bfloat16")
            for name in ("gpu", "tiny-vram")
            for batch in (None, 1)
        ]
    return ordered


def read_wav(path: Path) -> np.ndarray:
    """A mono 16-bit WAV as float32 at 16 kHz (no PyAV on the device): the realform
    recordings are 8 kHz telephone audio, brought up by band-limited (FFT) resampling."""
    with wave.open(str(path)) as audio:
        assert (audio.getnchannels(), audio.getsampwidth()) == (1, 2), path
        rate = audio.getframerate()
        data = np.frombuffer(audio.readframes(audio.getnframes()), dtype="<i2")
    samples = data.astype(np.float32) / 32768.0
    return samples if rate == SAMPLE_RATE else resampled(samples, rate)


def resampled(samples: np.ndarray, rate: int) -> np.ndarray:
    length = round(len(samples) * SAMPLE_RATE / rate)
    spectrum = np.fft.rfft(samples.astype(np.float64))
    return (np.fft.irfft(spectrum, length) * (length / len(samples))).astype(np.float32)


def recordings(quick: bool) -> dict[Path, tuple[np.ndarray, str]]:
    """Each recording's audio and reference text; the dry run's parts joined, with half a
    second of silence after each."""
    if quick:
        gap = np.zeros(8000, np.float32)
        audio = np.concatenate([x for path in QUICK_PARTS for x in (read_wav(path), gap)])
        text = " ".join(p.with_suffix(".txt").read_text(encoding="utf-8") for p in QUICK_PARTS)
        return {QUICK: (audio, text)}
    return {
        path: (read_wav(path), path.with_suffix(".txt").read_text(encoding="utf-8"))
        for path in (ESPEAK, REALFORM)
    }


def transformers_cell(
    cell: Cell, model, device: str, audio: np.ndarray, ref: str, beams: int | None, warm_up: bool
) -> dict:
    chosen = profile.load(cell.profile)
    section = {**chosen.settings_for("transformers"), "compute_type": cell.dtype}
    chosen = dataclasses.replace(
        chosen, device=device, backends={**chosen.backends, "transformers": section}
    )
    if cell.policy is not None:
        self_policy, _, cross = cell.policy.partition("|")
        chosen = dataclasses.replace(chosen, kv_self=self_policy, kv_cross=cross)
    backend = registry.get("transformers")(model, chosen, device)
    backend.load()
    request = DecodeRequest(batch_size=cell.batch, beam_size=beams)
    # Warm-up on the whole recording: on the H200 a 5 s warm-up left the first long-file
    # cells of a process 2-8x slower than the same cell later (gpu_check_h200*.md). The
    # dry run times nothing worth reading, and the warm-up is the timed call again.
    if warm_up:
        list(backend.transcribe(audio, request).segments)
    torch = _torch()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    run = backend.transcribe(audio, request)
    segments = list(run.segments)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    report = run.report
    text = "".join(s.text for s in segments)
    return {
        "section": cell.section,
        "cell": cell.label(),
        "policy": f"{chosen.kv_self} | {chosen.kv_cross}",
        "beams": report.settings.get("beam size"),
        "batch": report.batch_size,
        "seconds": round(seconds, 2),
        "ms_per_token": round(1000 * seconds / max(1, report.tokens), 2),
        "tokens": report.tokens,
        "wer": round(pooled_wer([(ref, text)]), 4),
        "kv_self_peak_mb": round(report.kv_self_peak_bytes / 1e6, 2),
        "kv_cross_mb": round(report.kv_cross_bytes / 1e6, 2),
        "kv_provenance": dict(report.kv_provenance),
        "cuda_max_allocated_mb": (
            round(torch.cuda.max_memory_allocated() / 1e6, 1) if device == "cuda" else None
        ),
    }


def whisper_cpp_cell(cache: str, model, device: str, audio: np.ndarray, ref: str) -> dict:
    chosen = profile.load("gpu")
    policy = "full" if cache == "f16" else cache
    section = {**chosen.settings_for("whispercpp"), "use_gpu": device == "cuda"}
    chosen = dataclasses.replace(
        chosen,
        kv_self=policy,
        kv_cross="full" if cache == "f16" else f"full,{cache}",
        backends={**chosen.backends, "whispercpp": section},
    )
    backend = registry.get("whispercpp")(model, chosen, "auto")
    backend.load()
    started = time.perf_counter()
    run = backend.transcribe(audio, DecodeRequest())
    text = "".join(s.text for s in run.segments)
    seconds = time.perf_counter() - started
    report = run.report
    return {
        "section": "whisper.cpp",
        "cell": f"whisper.cpp / {cache} self + cross / flash attention",
        "seconds": round(seconds, 2),
        "decode_ms_per_step": report.engine_timings_ms.get("decode"),
        "tokens": report.tokens,
        "wer": round(pooled_wer([(ref, text)]), 4),
        "kv_mb": {
            k: round(v / 1e6, 2)
            for k, v in report.engine_memory_bytes.items()
            if k.startswith("kv ")
        },
        "kv_types": dict(report.engine_kv_types),
    }


def _torch():
    import torch

    return torch


def _device_name(device: str) -> str:
    if device == "cuda":
        torch = _torch()
        return f"cuda: {torch.cuda.get_device_name(0)} (torch {torch.__version__})"
    return "cpu (dry run)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--minutes", type=float, default=7.0, help="deadline for the cells")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="35 s of real speech, 3 cells at beam 1, one cache type",
    )
    parser.add_argument("--whisper-cli", type=Path, default=None)
    parser.add_argument("--model-dir", type=Path, default=None, help="transformers weights")
    parser.add_argument("--name", default="gpu_check")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results")
    args = parser.parse_args()
    deadline = time.monotonic() + 60 * args.minutes
    model = _model(args.model_dir)
    audio = recordings(args.quick)
    rows, skipped = [], []
    ordered = cells(args.device, args.quick)
    float16_first = [cell for cell in ordered if cell.section != "bfloat16"]
    rows += _transformers_rows(args, deadline, model, audio, float16_first, skipped)
    rows += _whisper_cpp_rows(args, deadline, audio[QUICK if args.quick else ESPEAK], skipped)
    bfloat16 = [cell for cell in ordered if cell.section == "bfloat16"]
    rows += _transformers_rows(args, deadline, model, audio, bfloat16, skipped)
    _write(args, rows, skipped)


def _transformers_rows(args, deadline: float, model, audio, cells_: list, skipped: list) -> list:
    rows = []
    for cell in cells_:
        if time.monotonic() > deadline:
            skipped.append(cell.label())
            continue
        beams = 1 if args.quick else None  # the dry run: greedy, the same search code
        recording = audio[cell.recording]
        rows.append(transformers_cell(cell, model, args.device, *recording, beams, not args.quick))
        print(rows[-1], flush=True)
    return rows


def _whisper_cpp_rows(args, deadline: float, recording: tuple, skipped: list[str]) -> list:
    if args.whisper_cli is not None:
        os.environ["KVSCRIBE_WHISPER_CLI"] = str(args.whisper_cli)
    if "KVSCRIBE_WHISPER_CLI" not in os.environ:
        skipped.append("whisper.cpp: no --whisper-cli given")
        return []
    if not _built_in_time(Path(os.environ["KVSCRIBE_WHISPER_CLI"]), deadline):
        skipped.append("whisper.cpp: whisper-cli was not built (see whisper_build.log)")
        return []
    model = _ggml_model(args.model_dir)
    rows = []
    for cache in WHISPER_CPP_CACHES[1:2] if args.quick else WHISPER_CPP_CACHES:
        if time.monotonic() > deadline:
            skipped.append(f"whisper.cpp {cache}")
            continue
        rows.append(whisper_cpp_cell(cache, model, args.device, *recording))
        print(rows[-1], flush=True)
    return rows


def _built_in_time(binary: Path, deadline: float) -> bool:
    """Wait for a whisper-cli being built beside this run (gpu_check.sh), until the deadline
    or until its build says it failed (BUILD-FAILED beside it)."""
    failed = binary.with_name("BUILD-FAILED")
    while not binary.exists() and not failed.exists() and time.monotonic() < deadline:
        time.sleep(2)
    return binary.exists()


def _ggml_model(model_dir: Path | None):
    """whisper.cpp's model: written from the carried transformers weights (no ggml file
    travels to the device), else the one kvscribe resolves here."""
    from kvscribe.models import ModelRef, ggml, resolve

    if model_dir is None:
        return resolve(None, ("ggml",))
    target = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "ggml-tiny.en.bin"
    ggml.from_transformers(model_dir, target)
    return ModelRef("tiny.en", target, "ggml", f"written from {model_dir}")


def _model(model_dir: Path | None):
    from kvscribe.models import ModelRef, resolve

    if model_dir is None:
        return resolve(None, ("transformers",))
    return ModelRef("tiny.en", model_dir, "transformers", f"carried ({model_dir.name})")


def _write(args, rows: list[dict], skipped: list[str]) -> None:
    if args.out is not None:
        results_file.OUT = args.out
    meta = {"device": _device_name(args.device), "quick": args.quick, "not_run": skipped}
    lines = [
        "| section | cell | seconds | ms/token | WER | KV self peak + cross, MB | CUDA max "
        "allocated, MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kv = (
            f"{r['kv_self_peak_mb']} + {r['kv_cross_mb']}"
            if "kv_cross_mb" in r
            else ", ".join(f"{k} {v}" for k, v in r["kv_mb"].items())
        )
        per_token = r.get("ms_per_token", r.get("decode_ms_per_step"))
        lines.append(
            f"| {r['section']} | {r['cell']} | {r['seconds']} | {per_token} | {r['wer']} | "
            f"{kv} | {r.get('cuda_max_allocated_mb')} |"
        )
    if skipped:
        lines += ["", "Not run (past the deadline, or not available): " + "; ".join(skipped)]
    results_file.write(args.name, meta, rows, "\n".join(lines))


if __name__ == "__main__":
    main()
