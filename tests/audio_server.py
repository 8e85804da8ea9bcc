"""A private PulseAudio server standing in for a microphone: a null sink `vmic` whose monitor
is the default source, so what `paplay` plays into the sink is what a recording program hears.

The sink runs with `norewinds=1`, which makes it render in 50 ms blocks, as a sound card's
clock ticks, instead of its default 2 s: with 2 s blocks a new recording heard nothing for
up to 2 s after it opened, and could miss the start of a clip played at once (a CI run
recorded 10.9 s of the 11 s JFK clip plus 1.5 s of silence).

Its socket and state live in a temporary folder of its own (PULSE_SERVER and
PULSE_RUNTIME_PATH point children there), so it neither needs nor disturbs a desktop's
sound server. PortAudio reaches it through ALSA's pulse plugin, as it reaches a laptop's.
Debian: apt-get install pulseaudio pulseaudio-utils libasound2-plugins libportaudio2
(`.ci/run` installs them).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SINK = "vmic"
_START_WITHIN = 15.0  # seconds for the server to answer (bounded: a broken one fails)


def missing() -> str | None:
    """Why no audio server can be started here, or None."""
    for tool in ("pulseaudio", "pactl", "paplay"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install pulseaudio pulseaudio-utils)"
    if ctypes.util.find_library("portaudio") is None:
        return "the PortAudio library is not installed (apt-get install libportaudio2)"
    if not Path("/usr/share/alsa/alsa.conf.d/50-pulseaudio.conf").exists():
        return "ALSA's pulse plugin is not installed (apt-get install libasound2-plugins)"
    return None


@contextmanager
def running(folder: Path, slow_start: bool = False) -> Iterator[dict[str, str]]:
    """Start a server in `folder`; yield the environment a client needs to use it; stop it.
    `slow_start`: the sink keeps its default 2 s blocks, a device whose first audio comes
    up to 2 s after a recording opens."""
    folder.mkdir(parents=True, exist_ok=True)
    socket = folder / "native"
    env = {
        **os.environ,
        "PULSE_RUNTIME_PATH": str(folder),
        "PULSE_STATE_PATH": str(folder),
        "PULSE_SERVER": f"unix:{socket}",
        "XDG_RUNTIME_DIR": str(folder),
    }
    server = subprocess.Popen(
        [
            "pulseaudio",
            "--daemonize=no",
            "--exit-idle-time=-1",
            "--use-pid-file=no",
            "--disable-shm=yes",
            "-n",  # no default.pa: only the modules named here
            f"--load=module-native-protocol-unix socket={socket} auth-anonymous=1",
            f"--load=module-null-sink sink_name={SINK} rate=16000 channels=1"
            + ("" if slow_start else " norewinds=1"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_until_up(env, server)
        _pactl(env, "set-default-source", f"{SINK}.monitor")
        _pactl(env, "set-default-sink", SINK)
        yield env
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        if server.stderr is not None:
            server.stderr.close()


def _wait_until_up(env: dict[str, str], server: subprocess.Popen) -> None:
    deadline = time.monotonic() + _START_WITHIN
    while time.monotonic() < deadline:
        if server.poll() is not None:
            error = server.stderr.read().decode(errors="replace") if server.stderr else ""
            raise RuntimeError(f"pulseaudio exited with {server.returncode}: {error[-1000:]}")
        if subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"pulseaudio did not answer within {_START_WITHIN:g} s")


def _pactl(env: dict[str, str], *args: str) -> None:
    subprocess.run(["pactl", *args], env=env, check=True, capture_output=True, timeout=10)


def play(env: dict[str, str], path: Path) -> None:
    """Play `path` into the sink at its own pace (returns when it has been played)."""
    subprocess.run(
        ["paplay", f"--device={SINK}", str(path)],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )


@dataclass(frozen=True)
class Heard:
    """What `kvscribe mic --live` made of a clip played into the microphone."""

    code: int  # its exit status after Ctrl-C
    text: str  # what it committed (its -o file)
    stats: dict  # its --stats-json ({} if it wrote none)
    log: str  # its stderr


def record_while_playing(
    env: dict[str, str], kvscribe: Path, clip: Path, folder: Path, ready_within: float = 120.0
) -> Heard:
    """Start `kvscribe mic --live` on the server's default source, play `clip` into it once
    it listens, Ctrl-C after 1.5 s of silence (the pause that ends the last utterance)."""

    def played(mic: subprocess.Popen) -> None:
        play(env, clip)
        time.sleep(1.5)

    return _recorded(env, kvscribe, folder, played, ready_within)


def record_until_unplugged(
    env: dict[str, str], kvscribe: Path, clip: Path, folder: Path, ends_within: float
) -> Heard:
    """Start `kvscribe mic --live`, play `clip` into it, then take the microphone away (its
    sink's module unloaded, as a USB microphone's device goes) and wait `ends_within`
    seconds for it to end by itself (a Ctrl-C after that)."""

    def played_then_unplugged(mic: subprocess.Popen) -> None:
        play(env, clip)
        time.sleep(1.5)
        _pactl(env, "unload-module", "module-null-sink")
        with contextlib.suppress(subprocess.TimeoutExpired):
            mic.wait(timeout=ends_within)

    return _recorded(env, kvscribe, folder, played_then_unplugged, 120.0)


def record_for(env: dict[str, str], kvscribe: Path, seconds: float, folder: Path) -> Heard:
    """Start `kvscribe mic --live` on the server's default source and Ctrl-C it `seconds`
    after it says it listens."""
    return _recorded(env, kvscribe, folder, lambda mic: time.sleep(seconds), 120.0)


def _recorded(env, kvscribe: Path, folder: Path, meanwhile, ready_within: float) -> Heard:
    out, err, stats = folder / "mic.txt", folder / "stderr.txt", folder / "stats.json"
    command = [str(kvscribe), "mic", "--live", "-o", str(out), "--stats-json", str(stats)]
    with err.open("wb") as stderr:
        mic = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            _wait_until_listening(err, mic, ready_within)
            meanwhile(mic)
            if mic.poll() is None:  # not ended by itself
                mic.send_signal(signal.SIGINT)
            code = mic.wait(timeout=300)
        finally:
            if mic.poll() is None:
                mic.kill()
                mic.wait(timeout=30)
    return Heard(
        code,
        out.read_text(encoding="utf-8") if out.exists() else "",
        json.loads(stats.read_text()) if stats.exists() else {},
        err.read_text(encoding="utf-8", errors="replace"),
    )


def _wait_until_listening(err: Path, mic: subprocess.Popen, within: float) -> None:
    deadline = time.monotonic() + within
    while "listening to" not in err.read_text(encoding="utf-8", errors="replace"):
        if mic.poll() is not None:
            raise RuntimeError(f"kvscribe mic exited {mic.returncode}: {err.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"kvscribe mic did not start listening within {within:g} s")
        time.sleep(0.1)
