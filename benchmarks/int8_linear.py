"""The transformers backend's int8 linear layers (`--compute-type int8`) against the paths
that could replace torch.ao's deprecated dynamic quantisation (backends/transformers/weights.py).

    .venv/bin/pip install torchao==0.18.0   # optional: its row reads "not installed" without
    .venv/bin/python benchmarks/int8_linear.py [--threads 2] [--out int8_linear]

Per tiny.en linear shape (attention 384x384, MLP 384x1536 and 1536x384) and row count
(5: one chunk's beams; 40: batch 8 x beam 5; 1500: one encoder window), in this process on
`--threads` torch threads: the median time of one call over fp32 nn.Linear, torch.ao's
quantize_dynamic (per-channel int8 weights, activations quantised per call: kvscribe's
int8 today), torchao's Int8DynamicActivationInt8WeightConfig applied with quantize_ (eager,
no torch.compile: how kvscribe runs), and torch's weight-only int8 kernel
torch._weight_int8pack_mm; plus each path's largest difference from fp32 on the same input.
Writes benchmarks/results/NAME.json and .md.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings

import results_file
import torch

SHAPES = ((384, 384), (384, 1536), (1536, 384))
ROWS = (5, 40, 1500)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="int8_linear")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    rows = []
    for fan_in, fan_out in SHAPES:
        layer = torch.nn.Linear(fan_in, fan_out).eval().requires_grad_(False)
        paths = _paths(layer)
        for count in ROWS:
            x = torch.randn(count, fan_in)
            with torch.inference_mode():
                reference = layer(x)
                for name, call in paths.items():
                    rows.append(_row(name, call, x, reference, fan_in, fan_out))
    meta = {"threads": args.threads, "torch": torch.__version__, "torchao": _torchao_version()}
    results_file.write(args.out, meta, rows, _markdown(rows, args.threads))


def _paths(layer: torch.nn.Linear) -> dict:
    """Each path's callable over the same weights (None: not available here)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = quantize_dynamic(
            torch.nn.Sequential(copy.deepcopy(layer)),
            {torch.nn.Linear: per_channel_dynamic_qconfig},
            dtype=torch.qint8,
        )
    return {
        "fp32": layer,
        "torch.ao quantize_dynamic (kvscribe today)": dynamic,
        "torchao int8 dynamic, eager": _torchao(layer),
        "torch._weight_int8pack_mm (weight-only)": _weight_only(layer),
    }


def _torchao(layer: torch.nn.Linear):
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError:
        return None
    quantized = torch.nn.Sequential(copy.deepcopy(layer))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_(quantized, Int8DynamicActivationInt8WeightConfig())
    return quantized


def _weight_only(layer: torch.nn.Linear):
    weight = layer.weight
    scales = weight.abs().amax(dim=1) / 127
    packed = torch.round(weight / scales[:, None]).clamp(-128, 127).to(torch.int8)
    return lambda x: torch._weight_int8pack_mm(x, packed, scales) + layer.bias


def _row(name, call, x, reference, fan_in: int, fan_out: int) -> dict:
    row = {"path": name, "shape": f"{fan_in}x{fan_out}", "rows": x.shape[0]}
    if call is None:
        return {**row, "available": False}
    for _ in range(5):
        call(x)
    times = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(20):
            out = call(x)
        times.append((time.perf_counter() - started) / 20)
    error = float((out - reference).abs().max())
    return {**row, "available": True, "median_us": statistics.median(times) * 1e6, "max_abs": error}


def _markdown(rows: list[dict], threads: int) -> str:
    fp32 = {(r["shape"], r["rows"]): r["median_us"] for r in rows if r["path"] == "fp32"}
    lines = [
        f"One call of a tiny.en-shaped linear layer, median of 7 x 20 calls, {threads} torch "
        "threads, eager (no torch.compile). x fp32: the path's time over fp32's.",
        "",
        "| shape | rows | path | median us | x fp32 | max abs diff from fp32 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["available"]:
            lines.append(f"| {r['shape']} | {r['rows']} | {r['path']} | not installed | - | - |")
            continue
        ratio = r["median_us"] / fp32[(r["shape"], r["rows"])]
        lines.append(
            f"| {r['shape']} | {r['rows']} | {r['path']} | {r['median_us']:.1f} | "
            f"{ratio:.2f} | {r['max_abs']:.4f} |"
        )
    return "\n".join(lines)


def _torchao_version() -> str | None:
    try:
        import torchao
    except ImportError:
        return None
    return torchao.__version__


if __name__ == "__main__":
    main()
