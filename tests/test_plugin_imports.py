"""A third-party backend written against `kvscribe.backends.base` as it was before the
contract's types moved to `kvscribe.contract` still loads and runs: a minimal plug-in
package with its own entry point, put on the path of a real `kvscribe` run."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import KVSCRIBE, SAMPLE

pytestmark = [pytest.mark.model]

# Every name a plug-in could import from kvscribe.backends.base before the move.
PLUGIN = '''
from kvscribe.backends.base import (
    OPTIONAL_FIELDS, Backend, Capabilities, DecodeRequest, DecoderReport, Segment,
    Transcription, not_honoured, shared_by_language,
)


class CountingBackend(Backend):
    """Says how many samples it was given: proof the audio reached it."""

    name = "counting"
    summary = "a third-party test plug-in"
    capabilities = Capabilities(model_formats=("ctranslate2",), devices=("cpu",),
                                kv_controls=("full",))

    def load(self) -> None:
        pass

    def transcribe(self, audio, request: DecodeRequest) -> Transcription:
        assert "hotwords" in OPTIONAL_FIELDS and callable(not_honoured)
        assert callable(shared_by_language)
        text = f" {audio.size} samples heard"
        segment = Segment(id=0, start=0.0, end=audio.size / 16000, text=text)
        return Transcription("en", None, iter([segment]), DecoderReport(tokens=1))
'''


def _install_plugin(site: Path) -> None:
    """What pip leaves for a package with an entry point: the module and its dist-info."""
    (site / "counting_plugin.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "counting_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: counting-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[kvscribe.backends]\ncounting = counting_plugin:CountingBackend\n"
    )


def test_a_plugin_written_against_the_old_base_module_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_plugin(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = tmp_path / "out"
    argv = [str(KVSCRIBE), str(SAMPLE), "-b", "counting", "-o", str(out), "-f", "json", "-q"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "jfk.json").read_text())
    assert result["text"] == "176000 samples heard"  # 11 s at 16 kHz reached the plug-in
    listed = subprocess.run([str(KVSCRIBE), "backends"], capture_output=True, text=True, env=env)
    assert "counting" in listed.stdout and "broken" not in listed.stdout, listed.stdout
