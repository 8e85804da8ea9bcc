"""kvscribe's whispercpp backend vs whisper-cli called directly, same flags, same clip.

    .venv/bin/python benchmarks/whispercpp_overhead.py [CLIP] [--repeat N] [--profile NAME]

Each repeat runs both, interleaved, as whole processes timed from outside:
`kvscribe CLIP -b whispercpp -p PROFILE -f txt -q` (Python start-up, audio
decoding, the temporary WAV and parsing included) and whisper-cli with exactly
the argv kvscribe builds, on the original file. One untimed warm-up of each
first. Prints medians and the overhead ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvscribe.backends.base import DecodeRequest

from kvscribe import models, profile, registry

KVSCRIBE = Path(sys.executable).parent / "kvscribe"


def main() -> None:
    parser = argparse.ArgumentParser()
    default = Path(__file__).resolve().parents[2] / "shared/eval/clips/espeak_longform_en.wav"
    parser.add_argument("clip", nargs="?", type=Path, default=default)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="cpu-laptop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        direct = _direct_argv(args.clip, args.profile, Path(work) / "out")
        ours = [str(KVSCRIBE), str(args.clip), "-b", "whispercpp", "-p", args.profile]
        ours += ["-f", "txt", "-q"]
        print("direct:  ", " ".join(direct))
        print("kvscribe:", " ".join(ours))
        times: dict[str, list[float]] = {"direct": [], "kvscribe": []}
        for round_ in range(args.repeat + 1):
            for name, argv in (("direct", direct), ("kvscribe", ours)):
                seconds = _timed(argv)
                if round_:  # round 0 warms the page cache and the converted model
                    times[name].append(seconds)
    direct_s, ours_s = (statistics.median(times[k]) for k in ("direct", "kvscribe"))
    print(f"\nruns: direct {times['direct']}, kvscribe {times['kvscribe']}")
    print(f"median wall: whisper-cli direct {direct_s:.2f} s, kvscribe {ours_s:.2f} s")
    print(f"overhead: {100 * (ours_s / direct_s - 1):+.1f} %")


def _direct_argv(clip: Path, profile_name: str, out: Path) -> list[str]:
    """The argv kvscribe itself would run, pointed at the original file."""
    backend_cls = registry.get("whispercpp")
    backend = backend_cls(models.resolve(None, ("ggml",)), profile.load(profile_name), "cpu")
    backend.load()
    beams = int(backend.settings.get("beam_size", 5))
    return backend.argv_for(clip, out, DecodeRequest(), beams)


def _timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
