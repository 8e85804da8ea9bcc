"""The KV budget as concurrency: `kvscribe serve` with one budget, each engine under the
no-loss profile (every position, a cross-attention copy per beam) and tiny-vram's (sinks +
a window in Q8_0, one shared Q8_0 cross copy, greedy), the same requests through the same
number of clients.

    .venv/bin/python benchmarks/serve_kv_budget.py [--budget-mb 64] [--clients 8]

Each configuration is a whole `kvscribe serve` process (one lane with 2 threads, so that
short requests can share batches and the budget is what bounds them), warmed up with one
request; then `--clients` threads send the eval corpus' short real clips (the ps_ ones),
twice over, as verbose JSON with kvscribe's run figures. Figures: a row's KV bytes
(measured or estimated, as the server says), the most rows reserved at once and the
largest batch of requests decoded together (from each answer's stats), throughput (audio
seconds per wall second), the largest KV cache one decode held (a request's stats' figure:
its batch's, when requests were decoded together),
peak RSS (VmHWM), pooled WER and errors. Writes benchmarks/results/serve_kv_budget.{json,md}.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402
from serve_load import KVSCRIBE, SHORTS, Server, free_port, multipart, wav  # noqa: E402

from kvscribe.audio import load_audio  # noqa: E402
from kvscribe.bench.wer import pooled_wer  # noqa: E402

DEFAULT = "default"  # the server's defaults: its profile, lanes and budget
CONFIGS = [
    *(
        (backend, profile)
        for backend in ("transformers", "onnx", "ctranslate2")
        for profile in ("no-loss", "tiny-vram")
    ),
    ("ctranslate2", DEFAULT),  # `kvscribe serve` with no flags, beside them
]
ROUNDS = 2


class BudgetServer(Server):
    """`kvscribe serve` for one backend and profile at one budget."""

    def __init__(self, backend: str, profile: str, budget_mb: float):
        self.kind = f"{backend} {profile}"
        self.port = free_port()
        self.path = "/v1/audio/transcriptions"
        self.fields = {"model": "whisper-1", "response_format": "verbose_json"}
        self.fields["kvscribe_stats"] = "true"
        argv = [str(KVSCRIBE), "serve", "--port", str(self.port), "--quiet"]
        if profile != DEFAULT:
            argv += ["--backend", backend, "--profile", profile]
            argv += ["--kv-budget-mb", str(budget_mb), "--lanes", "1", "--threads", "2"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_until_listening(600)  # onnx exports its graphs on first use

    def answer(self, audio: bytes) -> tuple[int, dict]:
        body = multipart(audio, self.fields)
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1800)
        headers = {"Content-Type": "multipart/form-data; boundary=kvb"}
        connection.request("POST", self.path, body=body, headers=headers)
        response = connection.getresponse()
        payload = json.loads(response.read())
        connection.close()
        return response.status, payload

    def metrics(self) -> dict[str, float]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        figures = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                figures[name] = float(value)
        return figures


def run(backend: str, profile: str, budget_mb: float, clients: int, clips) -> dict:
    server = BudgetServer(backend, profile, budget_mb)
    try:
        server.answer(clips[0][2])  # warm-up (and the onnx export, once)
        pending = [c for _ in range(ROUNDS) for c in clips]
        answers: list[tuple[str, int, dict]] = []

        def client() -> None:
            while pending:
                try:
                    name, _, audio = pending.pop(0)
                except IndexError:
                    return
                status, payload = server.answer(audio)
                answers.append((name, status, payload))

        started = time.perf_counter()
        with cf.ThreadPoolExecutor(clients) as pool:
            for done in [pool.submit(client) for _ in range(clients)]:
                done.result()
        wall = time.perf_counter() - started
        figures = server.metrics()
        rss = server.peak_rss()
    finally:
        server.stop()
    return _row(backend, profile, clips, answers, wall, figures, rss)


def _row(backend, profile, clips, answers, wall, figures, rss) -> dict:
    seconds = {name: s for name, s, _ in clips}
    references = {name: (SHORT_DIR / f"{name}.txt").read_text() for name, _, _ in clips}
    ok = [(name, payload) for name, status, payload in answers if status == 200]
    together = [
        1 + int(payload["kvscribe"]["settings"].get("decoded with", "0").split()[0])
        for _, payload in ok
    ]
    row_figure = next(k for k in figures if k.startswith("kvscribe_kv_row_bytes"))
    row_bytes = figures[row_figure]
    budget = figures.get("kvscribe_kv_budget_bytes")
    errors: dict[str, int] = {}
    for _, status, _ in answers:
        if status != 200:
            errors[str(status)] = errors.get(str(status), 0) + 1
    return {
        "backend": backend,
        "profile": profile,
        "budget_mb": None if budget is None else round(budget / 1e6, 1),
        "row_mb": round(row_bytes / 1e6, 2),
        "row_provenance": row_figure.split('"')[1],
        "rows_reserved_peak": round(figures["kvscribe_kv_reserved_peak_bytes"] / row_bytes, 2),
        "requests_decoded_together_max": max(together, default=0),
        "requests": len(answers),
        "throughput_audio_s_per_s": round(sum(seconds[n] for n, _ in ok) / wall, 2),
        "kv_held_peak_one_decode_mb": round(figures["kvscribe_kv_held_peak_bytes"] / 1e6, 2),
        "peak_rss_mb": round(rss / 1e6, 1),
        "wer": round(pooled_wer([(references[n], p["text"]) for n, p in ok]), 4),
        "errors": errors,
    }


SHORT_DIR = SHORTS[0].parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-mb", type=float, default=64.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--backends", nargs="+", default=["transformers", "onnx", "ctranslate2"])
    args = parser.parse_args()
    clips = [(p.stem, load_audio(p).size / 16000, wav(load_audio(p))) for p in SHORTS]
    rows = []
    for backend, profile in CONFIGS:
        if backend in args.backends:
            rows.append(run(backend, profile, args.budget_mb, args.clients, clips))
            print(json.dumps(rows[-1]), flush=True)
    meta = {
        "budget_mb": args.budget_mb,
        "clients": args.clients,
        "server": "kvscribe serve --lanes 1 --threads 2 (one engine on both cores)",
        "requests": f"the {len(clips)} ps_ eval clips, {ROUNDS} times over",
    }
    results_file.write("serve_kv_budget", meta, rows, _markdown(rows, meta))


def _markdown(rows: list[dict], meta: dict) -> str:
    head = (
        f"One KV budget of {meta['budget_mb']:g} MB, {meta['clients']} clients, "
        f"{meta['requests']}; {meta['server']}; the last row is `kvscribe serve` with no "
        "flags (its profile, lanes and budget). A decode's KV is its batch's: the requests "
        "decoded together.\n\n"
        "| backend | profile | budget MB | row MB (how known) | rows reserved at most | "
        "requests decoded together at most | throughput (audio s/s) | KV one decode held, MB "
        "| peak RSS MB | WER | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['backend']} | {r['profile']} | {r['budget_mb'] or 'none'} | "
        f"{r['row_mb']} ({r['row_provenance']}) | "
        f"{r['rows_reserved_peak']} | {r['requests_decoded_together_max']} | "
        f"{r['throughput_audio_s_per_s']} | {r['kv_held_peak_one_decode_mb']} | "
        f"{r['peak_rss_mb']} | {r['wer']} | {r['errors'] or 'none'} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
