"""The contract every registered backend honours (new backends join by registering)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from kvscribe import registry
from kvscribe.audio import load_audio
from kvscribe.backends.base import Backend
from kvscribe.contract import DecodeRequest, DecoderReport
from kvscribe.types import Segment
from tests.conftest import SAMPLE, SAMPLE_TEXT, wer
from tests.loaded import backend as shared_backend

pytestmark = [pytest.mark.model]

ENTRIES = registry.discover()


@pytest.fixture(scope="module", params=list(ENTRIES))
def loaded(request) -> Backend:
    """Each registered backend with the embedded model (whispercpp: after whisper-cli is found
    or built; onnx: after the export); one that cannot run here is skipped with its own
    reason."""
    if request.param == "whispercpp":
        request.getfixturevalue("whisper_cli")
    if request.param == "onnx":  # its graphs: `kvscribe setup onnx`
        request.getfixturevalue("onnx_export")
    reason = ENTRIES[request.param].backend.check_available()
    if reason is not None:
        pytest.skip(reason)
    return shared_backend(request.param, "cpu-laptop")


@pytest.fixture(scope="module")
def greedy_run(loaded) -> tuple:
    """The sample decoded greedily by `loaded`, once for the tests that only read the run:
    (report before the segments were read, the segments, the run)."""
    run = loaded.transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1))
    report_first = run.report
    return report_first, list(run.segments), run


def test_built_ins_are_registered_through_entry_points():
    assert ENTRIES["ctranslate2"].target == "kvscribe.backends.ctranslate2:CTranslate2Backend"
    assert all(e.load_error is None for e in ENTRIES.values())


@pytest.mark.parametrize("name", list(ENTRIES))
def test_getting_a_backend_imports_no_other_backend(name):
    """A run pays for its own backend's imports only (each is a start-up cost)."""
    others = [ENTRIES[o].target.split(":")[0] for o in ENTRIES if o != name]
    probe = f"from kvscribe import registry; registry.get({name!r}); import sys; "
    probe += f"print([m for m in {others!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("name", list(ENTRIES))
@pytest.mark.slow
def test_backend_declares_itself(name):
    backend_cls = ENTRIES[name].backend
    assert issubclass(backend_cls, Backend) and backend_cls.name == name
    caps = backend_cls.capabilities
    assert caps.model_formats and "cpu" in caps.devices and caps.kv_controls
    reason = backend_cls.check_available()
    assert reason is None or (isinstance(reason, str) and "\n" not in reason)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_importing_a_backend_module_loads_no_engine(name):
    module = ENTRIES[name].target.split(":")[0]
    probe = (
        f"import sys, {module}\n"
        "print([m for m in ('torch', 'transformers', 'faster_whisper', 'ctranslate2')"
        " if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_segments_stream_in_order_within_the_audio(greedy_run):
    samples = load_audio(SAMPLE)
    _, segments, run = greedy_run  # greedy: the order is the claim, not the beam
    assert segments and all(isinstance(s, Segment) for s in segments)
    assert [s.id for s in segments] == list(range(len(segments)))
    for before, after in itertools.pairwise(segments):
        assert before.start <= after.start
    assert all(0 <= s.start <= s.end <= samples.size / 16000 + 0.5 for s in segments)
    assert wer(SAMPLE_TEXT, "".join(s.text for s in segments)) <= 0.1
    assert run.language == "en"


def test_report_is_complete_after_the_segments(greedy_run):
    report_first, segments, run = greedy_run
    assert isinstance(report_first, DecoderReport)
    report = run.report
    assert report.windows == 1 and report.tokens >= sum(len(s.tokens) for s in segments)
    assert 0 < report.kv_self_peak_bytes <= report.kv_self_full_bytes
    assert report.kv_cross_bytes > 0 and report.settings


@pytest.mark.slow
def test_a_prompt_reaches_the_decoder_and_keeps_the_transcript(loaded, greedy_run):
    samples = load_audio(SAMPLE)
    _, plain_segments, plain = greedy_run
    plain_text = "".join(s.text for s in plain_segments)
    prompted = loaded.transcribe(samples, DecodeRequest(beam_size=1, prompt="President Kennedy:"))
    assert wer(SAMPLE_TEXT, "".join(s.text for s in prompted.segments)) <= 0.1
    assert plain_text
    if loaded.name == "transformers":  # the prompt's tokens sit in the measured cache
        assert prompted.report.kv_self_peak_bytes > plain.report.kv_self_peak_bytes
    if loaded.name == "whispercpp":
        argv = loaded.argv_for(SAMPLE, SAMPLE, DecodeRequest(prompt="President Kennedy:"), 1)
        assert argv[argv.index("--prompt") + 1] == "President Kennedy:"


def test_english_only_model_refuses_translation(loaded):
    from kvscribe.errors import UsageError

    with pytest.raises(UsageError, match="cannot translate"):
        loaded.transcribe(load_audio(SAMPLE), DecodeRequest(task="translate"))


def test_a_backend_with_a_missing_engine_says_what_to_install():
    class Missing(ENTRIES["ctranslate2"].backend):
        requires = ("ctranslate2", "kvscribe_no_such_engine")
        install_hint = "pip install kvscribe-no-such-engine"

    assert ENTRIES["ctranslate2"].backend.check_available() is None
    assert Missing.check_available() == (
        "kvscribe_no_such_engine is not installed: pip install kvscribe-no-such-engine"
    )
