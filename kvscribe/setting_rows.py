"""The rows of a run's settings table (the stats' upper half, `--stats-json`'s
"settings"), each worded once: every backend, the runner and live mode write a row under
one of these names, so one setting reads the same whichever backend ran
(tests/test_setting_rows.py fails on a row written under another name)."""

from __future__ import annotations

# What the run was asked for
FROM_COMMAND_LINE = "from the command line"  # which settings the flags chose
DEVICE = "device"
COMPUTE_TYPE = "compute type"
DTYPE = "dtype"
THREADS = "threads"
ENGINE_THREADS = "engine threads"
ENCODER = "encoder"  # which engine runs the audio encoder, and why
EXECUTION_PROVIDER = "execution provider"
WEIGHTS = "weights"
WHISPER_CLI = "whisper-cli"

# The decoding
BEAM_SIZE = "beam size"
BATCH_SIZE = "batch size"
SHARED_WITH = "decoded with"  # kvscribe serve: the other requests in a shared batch
ENCODER_WINDOW = "encoder window"
PREVIOUS_TEXT = "previous-text prompt"
TEMPERATURE_FALLBACK = "temperature fallback"
FALLBACK_FLAGS = "fallback flags"
FALLBACK_REDECODES = "fallback re-decodes"
WORD_TIMESTAMPS = "word timestamps"
READ_AGAIN = "read again"  # the sequential path: speech under a stretched word
TEXT_CONTEXT = "text context (-mc)"
FLASH_ATTENTION = "flash attention"
PROCESSORS = "processors (-p)"
PIECES = "pieces"
NON_SPEECH = "non-speech annotations"

# Live mode: when a buffer is re-decoded, committed, ended
STREAMING = "streaming"

# The cache
SELF_POLICY = "self-attn policy"
CROSS_POLICY = "cross-attn policy"
KV_CACHE_TYPES = "kv cache types"
KV_SELF_ALLOCATION = "kv self allocation"

# What was cut before decoding
VAD_FILTER = "vad filter"
DIGITAL_SILENCE = "digital silence"
CLIP_TIMESTAMPS = "clip timestamps"

ALL = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)
