"""The GPU check's dry run (benchmarks/gpu_check.py --device cpu --quick): the same code
paths as on a lent GPU short of CUDA, so the script is known to work before device time
is spent on it (docs/gpu_check.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.model, pytest.mark.transformers, pytest.mark.slow]


@pytest.mark.whispercpp
def test_the_gpu_check_runs_every_section_on_the_cpu(tmp_path, whisper_cli):
    pytest.importorskip("torch")
    argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    argv += ["--quick", "--out", str(tmp_path), "--whisper-cli", str(whisper_cli)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads((tmp_path / "gpu_check.json").read_text())
    assert written["meta"]["device"] == "cpu (dry run)" and written["meta"]["not_run"] == []
    rows = {row["section"]: row for row in written["rows"]}
    assert set(rows) == {"profiles", "policies", "whisper.cpp"}
    transformers = [row for row in written["rows"] if row["section"] != "whisper.cpp"]
    assert len(transformers) == 3
    for row in transformers:
        assert row["wer"] < 0.1, row
        assert row["kv_provenance"] == {"self": "measured", "cross": "measured"}, row
        assert row["kv_self_peak_mb"] > 0 and row["kv_cross_mb"] > 0 and row["tokens"] > 0
    gpu, lean = transformers[0], transformers[1]  # the gpu profile, then tiny-vram's
    assert lean["kv_self_peak_mb"] < gpu["kv_self_peak_mb"]
    assert lean["kv_cross_mb"] < gpu["kv_cross_mb"]
    whisper_cpp = rows["whisper.cpp"]
    assert whisper_cpp["kv_types"] == {"kv self": "q8_0", "kv cross": "q8_0"}
    assert whisper_cpp["wer"] < 0.1 and whisper_cpp["kv_mb"]["kv self"] > 0
    assert "cpu (dry run)" in (tmp_path / "gpu_check.md").read_text()
