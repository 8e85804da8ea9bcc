"""CTranslate2 on a CPU: one replica splitting each operation over N threads, against N
single-thread replicas each taking a share of the rows (backends/ctranslate2/replicas.py).

    .venv/bin/python benchmarks/ct2_replicas.py [--model-dir DIR] [--repeat 3] [--out NAME]
    taskset -c 0-3 python benchmarks/ct2_replicas.py --random-model /tmp/tiny-random \\
        --vocabulary vocabulary.txt --out NAME

N is the number of cores this process may use (run it under taskset to choose). Per
layout (replicas x threads each), in this process: encoding 8 windows of random log-mel
(a window per call, as kvscribe's batched path encodes on a CPU), and `generate` over
those 8 rows at beam 5 to the length limit (end-of-text suppressed), the rows cut into
one contiguous share per replica, the shares submitted at once. Forced steps make the
work independent of the weights, so a model of tiny.en's shape with random weights
(`--random-model`, built with transformers and CTranslate2's converter where the
embedded model cannot be copied) measures the same work.
Writes benchmarks/results/NAME.json and .md (default NAME: ct2_replicas).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import results_file

ROWS = 8
STEPS = 80
EOT = 50256  # tiny.en's end of text; suppressed so rows decode to the length limit
PROMPT = [50257, 50362]  # <|startoftranscript|> <|notimestamps|>
# A multilingual model's (base, small, ...): its end of text, and
# <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
MULTILINGUAL_EOT, MULTILINGUAL_PROMPT = 50257, [50258, 50259, 50359, 50363]


def main() -> None:
    args = _arguments()
    model_dir = args.model_dir
    if args.random_model:
        model_dir = _random_model(args.random_model, args.vocabulary)
    model_dir = model_dir or _embedded()
    if args.repeat == 0:  # only build the model
        print(model_dir)
        return
    cores = len(os.sched_getaffinity(0))
    rows = []
    for run in range(args.repeat):
        for replicas, threads in _layouts(cores):
            encode_s, decode_s, tokens = _measure(model_dir, replicas, threads)
            rows.append(
                {
                    "run": run,
                    "replicas": replicas,
                    "threads": threads,
                    "cores": cores,
                    "encode_8_windows_s": encode_s,
                    "generate_8_rows_s": decode_s,
                    "tokens_per_row": tokens,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    weights = "tiny.en (embedded)"
    if args.random_model or args.model_dir:
        weights = f"the model in {model_dir}"
    meta = {
        "device": "cpu",
        "model": weights,
        "cores_used": cores,
        "rows": ROWS,
        "steps": STEPS,
        "beam": 5,
        "compute_type": "int8",
    }
    results_file.write(args.out, meta, rows, _report(rows, cores, weights))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="a CTranslate2 Whisper model folder")
    parser.add_argument("--random-model", help="build a random tiny.en-shaped model here")
    parser.add_argument("--vocabulary", help="with --random-model: tiny.en's vocabulary.txt")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="ct2_replicas")
    return parser.parse_args()


def _layouts(cores: int) -> list[tuple[int, int]]:
    """(replicas, threads each): all threads in one replica, one replica per core, and
    two replicas of half the cores each where there are four or more."""
    layouts = [(1, cores)]
    if cores > 1:
        layouts.append((cores, 1))
    if cores >= 4:
        layouts.append((2, cores // 2))
    return layouts


def _measure(model_dir: str, replicas: int, threads: int) -> tuple[float, float, int]:
    import ctranslate2

    model = ctranslate2.models.Whisper(
        model_dir,
        device="cpu",
        compute_type="int8",
        inter_threads=replicas,
        intra_threads=threads,
    )
    features = np.random.default_rng(0).standard_normal((ROWS, 80, 3000), dtype=np.float32)
    _encode(model, features, replicas)  # warm-up: first-call allocations
    started = time.perf_counter()
    encoded = _encode(model, features, replicas)
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    tokens = _generate(model, encoded, replicas)
    return round(encode_s, 3), round(time.perf_counter() - started, 3), tokens


def _encode(model, features: np.ndarray, replicas: int) -> np.ndarray:
    import ctranslate2

    def one(window: np.ndarray) -> np.ndarray:
        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(window[None]))
        return np.asarray(model.encode(view, to_cpu=True))

    with ThreadPoolExecutor(replicas) as pool:
        return np.concatenate(list(pool.map(one, features)))


def _generate(model, encoded: np.ndarray, replicas: int) -> int:
    """The rows' decode; returns the tokens each row decoded (the same for all)."""
    import ctranslate2

    multilingual = model.is_multilingual
    prompt, eot = (MULTILINGUAL_PROMPT, MULTILINGUAL_EOT) if multilingual else (PROMPT, EOT)
    pending = [
        model.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(share)),
            [prompt] * len(share),
            beam_size=5,
            max_length=STEPS,
            suppress_tokens=[eot],
            asynchronous=True,
        )
        for share in np.array_split(encoded, replicas)
    ]
    lengths = {len(result.result().sequences_ids[0]) for part in pending for result in part}
    return lengths.pop() if len(lengths) == 1 else -1  # every row the same length, or -1


def _report(rows: list[dict], cores: int, weights: str) -> str:
    tokens = sorted({r["tokens_per_row"] for r in rows})
    lines = [
        f"{ROWS} windows encoded (a window per call) and {ROWS} rows decoded at beam 5 "
        f"(max_length {STEPS}, end of text suppressed: {tokens} tokens per row), int8, "
        f"weights: {weights}; {cores} cores used; medians of "
        f"{max(r['run'] for r in rows) + 1} runs (each run's figures in the JSON).",
        "",
        "| replicas x threads | encode s | generate s | x one replica's encode | "
        "x one replica's generate |",
        "|---|---|---|---|---|",
    ]
    medians = {}
    for layout in dict.fromkeys((r["replicas"], r["threads"]) for r in rows):
        mine = [r for r in rows if (r["replicas"], r["threads"]) == layout]
        medians[layout] = tuple(
            statistics.median(r[key] for r in mine)
            for key in ("encode_8_windows_s", "generate_8_rows_s")
        )
    base = medians[(1, cores)]
    for (replicas, threads), (encode_s, decode_s) in medians.items():
        lines.append(
            f"| {replicas} x {threads} | {encode_s:.2f} | {decode_s:.2f} | "
            f"{encode_s / base[0]:.2f} | {decode_s / base[1]:.2f} |"
        )
    return "\n".join(lines)


def _embedded() -> str:
    from kvscribe import models

    return str(models.resolve(None, ("ctranslate2",)).path)


def _random_model(folder: str, vocabulary: str) -> str:
    """A CTranslate2 int8 model of tiny.en's dimensions with random weights (transformers
    and torch build it) and tiny.en's vocabulary (`vocabulary`: a vocabulary.txt, one
    token per line; CTranslate2 finds Whisper's special tokens by name)."""
    import ctranslate2
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=51864,
        num_mel_bins=80,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        d_model=384,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=PROMPT[0],
        eos_token_id=EOT,
        bos_token_id=EOT,
        pad_token_id=EOT,
    )
    source = Path(folder) / "hf"
    WhisperForConditionalGeneration(config).save_pretrained(source)
    out = Path(folder) / "ct2"
    ctranslate2.converters.TransformersConverter(str(source)).convert(
        str(out), quantization="int8", force=True
    )
    words = Path(vocabulary).read_text(encoding="utf-8").splitlines()
    (out / "vocabulary.json").write_text(json.dumps(words))
    return str(out)


if __name__ == "__main__":
    main()
