"""The positions CTranslate2 decodes in each 30 s window, counted from its segments (the
engine does not expose its cache): the ctranslate2 backend's estimate of the
self-attention cache it held (kvscribe.kvcache.estimate)."""

from __future__ import annotations

from kvscribe.decoding import PROMPT_MAX
from kvscribe.models.ct2_file import WhisperDims


class WindowCounter:
    """Positions each 30 s window decodes: prompt (sot + previous text) + new tokens + eot."""

    def __init__(self, dims: WhisperDims, conditioned: bool):
        self.sot_length = 3 if dims.is_multilingual else 1
        self.conditioned = conditioned
        self.count = 0
        self.decoded = 0
        self.peak_positions = 0
        self._seek: int | None = None
        self._window_tokens = 0
        self._history = 0
        self._prompt_length = 0

    def add(self, seek: int, tokens: int) -> None:
        if seek != self._seek:
            self._close_window()
            self._seek = seek
            self.count += 1
        self._window_tokens += tokens
        self.decoded += tokens

    def add_chunk(self, tokens: int, prompt_length: int = 0) -> None:
        """A batched chunk's decode: a window of its own (`prompt_length`: its decoder
        prompt's tokens where kept, which a prompted chunk's self-attention cache holds)."""
        self.add(self.count, tokens)
        self._prompt_length = prompt_length

    def _close_window(self) -> None:
        if self._seek is None:
            return
        prompt = max(self.sot_length, self._prompt_length)
        if self.conditioned and self._history:
            prompt += 1 + min(self._history, PROMPT_MAX)
        self.peak_positions = max(self.peak_positions, prompt + self._window_tokens + 1)
        self.decoded += 1  # end-of-text
        self._history += self._window_tokens
        self._window_tokens = 0
        self._prompt_length = 0

    def finish(self) -> None:
        self._close_window()
        self._seek = None
