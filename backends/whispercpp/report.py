"""Read what whisper-cli prints: segment lines on stdout, memory and timings on stderr,
and the `-ojf` JSON file (language, tokens)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_SEGMENT = re.compile(
    r"^\[(\d+):(\d\d):(\d\d)\.(\d{3}) --> (\d+):(\d\d):(\d\d)\.(\d{3})\]  (?P<text>.*)$"
)
# whisper_init_state: kv self size  =    3.15 MB          (whisper.cpp)
# whisper_init_state: kv self size  =    1.67 MB (q8_0)   (kvscribe's patched build)
_MEMORY = re.compile(
    r"^whisper_\w+: (?P<what>kv \w+ +size|compute buffer \(\w+\)) *= *(?P<mb>[\d.]+) MB"
    r"(?: \((?P<type>\w+)\))?"
)
# whisper_print_timings:   encode time =   126.43 ms /     1 runs (  126.43 ms per run)
_TIMING = re.compile(
    r"^whisper_print_timings: +(?P<what>\w+) time = *(?P<ms>[\d.]+) ms(?: / *(?P<runs>\d+) runs)?"
)
_FALLBACKS = re.compile(r"^whisper_print_timings: +fallbacks = *(\d+) p / *(\d+) h")


@dataclass
class EngineFigures:
    """Memory (bytes) and timings (ms) as whisper.cpp itself reports them."""

    memory: dict[str, int] = field(default_factory=dict)  # "kv self", "compute buffer (decode)"
    kv_types: dict[str, str] = field(default_factory=dict)  # "kv self" -> "q8_0" (patched build)
    timings_ms: dict[str, float] = field(default_factory=dict)  # "encode", "batchd", "total"
    runs: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0
    states: int = 0  # whisper states that printed their caches: one per processor (-p)

    @property
    def kv_self_bytes(self) -> int:
        return self.memory.get("kv self", 0)

    @property
    def kv_cross_bytes(self) -> int:
        return self.memory.get("kv cross", 0)


def parse_stderr(text: str) -> EngineFigures:
    """Collect the memory and timing lines; a figure printed twice keeps its largest value
    (whisper.cpp re-allocates the self-attention cache when beams need more). With `-p N`
    each of the N whisper states prints its own figures; the timings are then the states'
    average (whisper_full_parallel divides their sum by N), the run counts their sum."""
    figures = EngineFigures()
    for line in text.splitlines():
        if match := _MEMORY.match(line):
            what = " ".join(match["what"].replace(" size", "").split())
            figures.states += what == "kv cross"  # printed once by each state, never re-sized
            nbytes = round(float(match["mb"]) * 1e6)  # whisper.cpp's MB are 10^6 bytes
            figures.memory[what] = max(figures.memory.get(what, 0), nbytes)
            if match["type"]:
                figures.kv_types[what] = match["type"]
        elif match := _TIMING.match(line):
            figures.timings_ms[match["what"]] = float(match["ms"])
            if match["runs"] is not None:
                figures.runs[match["what"]] = int(match["runs"])
        elif match := _FALLBACKS.match(line):
            figures.fallbacks = int(match[1]) + int(match[2])
    return figures


def parse_segment_line(line: str) -> tuple[float, float, str] | None:
    """`[00:00:01.000 --> 00:00:04.200]  text` -> (1.0, 4.2, " text"); None for other lines."""
    match = _SEGMENT.match(line.rstrip("\r\n"))
    if match is None:
        return None
    parts = [int(g) for g in match.groups()[:8]]
    return _seconds(*parts[:4]), _seconds(*parts[4:]), match["text"]


def _seconds(hours: int, minutes: int, seconds: int, millis: int) -> float:
    """The printed time as the float nearest its decimal (7.94, not 7 + 0.94)."""
    return ((hours * 60 + minutes) * 60_000 + seconds * 1000 + millis) / 1000


@dataclass(frozen=True)
class JsonResult:
    language: str
    decoded_tokens: int  # every token the decoder emitted, timestamps included


def parse_json(path: Path) -> JsonResult:
    """The `-ojf` file: the language, and how many tokens were decoded (text segments come
    from stdout as they are printed, so they stream)."""
    data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    decoded = sum(len(item.get("tokens", [])) for item in data.get("transcription", []))
    return JsonResult(data.get("result", {}).get("language", ""), decoded)


def merged(pieces: list[EngineFigures]) -> EngineFigures:
    """One input's figures from those of the pieces it ran as, one whisper-cli each: memory
    is each figure's largest (every piece allocates its own, one after another), timings
    and runs add up, and the states are the most any piece had at once."""
    total = EngineFigures()
    for figures in pieces:
        for what, nbytes in figures.memory.items():
            total.memory[what] = max(total.memory.get(what, 0), nbytes)
        total.kv_types.update(figures.kv_types)
        for what, ms in figures.timings_ms.items():
            total.timings_ms[what] = total.timings_ms.get(what, 0.0) + ms
        for what, runs in figures.runs.items():
            total.runs[what] = total.runs.get(what, 0) + runs
        total.fallbacks += figures.fallbacks
        total.states = max(total.states, figures.states)
    return total
