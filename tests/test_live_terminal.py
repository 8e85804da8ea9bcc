"""`kvscribe mic --live` on a terminal: the tentative words dim until committed, and the
status line (a pseudo-terminal stands in for the user's)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import KVSCRIBE, SAMPLE, SAMPLE_TEXT

pytestmark = [pytest.mark.model, pytest.mark.eval]  # as tests/test_live_cli.py's


@pytest.mark.slow
def test_on_a_terminal_tentative_text_is_dim_and_a_status_line_shows(tmp_path):
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "30"}
    # Re-decoding every 4 s still shows each utterance's words dim before they are committed.
    args = ("--input", str(SAMPLE), "--as-fast-as-possible", "--step", "4")
    proc = subprocess.Popen(
        [str(KVSCRIBE), "mic", *args],
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    screen = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        screen += data
    os.close(master)
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()
    text = screen.decode(errors="replace")
    # The tentative tail, dimmed: a dim span of the sample's words (the status line is dim
    # too, so a dim escape alone would not show it).
    spoken = set(re.findall(r"[a-z]+", SAMPLE_TEXT.lower()))
    dim = re.findall(r"\x1b\[2m(.*?)\x1b\[", text, flags=re.S)
    tentative = [span for span in dim if "latency" not in span]
    assert any(spoken & set(re.findall(r"[a-z]+", span.lower())) for span in tentative), dim[:4]
    assert "latency" in text and "KV" in text and "Ctrl-C to stop" in text  # the status line
    assert "your country" in text  # committed text stays on screen
