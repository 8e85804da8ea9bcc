"""A realtime session's audio as it arrives over the socket: the Realtime API's PCM16 at
24 kHz, resampled (PyAV) to Whisper's 16 kHz and cut into live mode's 0.1 s chunks
(kvscribe.serve.realtime runs the sessions)."""

from __future__ import annotations

import queue
import threading

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.live.capture import CHUNK_SECONDS, Emit
from kvscribe.serve.realtime_protocol import INPUT_RATE

_CHUNK = int(CHUNK_SECONDS * SAMPLE_RATE)


class SocketAudio:
    """A live source fed by the socket: PCM16 at 24 kHz in, 16 kHz float32 chunks out."""

    label = "realtime session (PCM16 24 kHz)"
    live = True  # audio keeps arriving whether the session keeps up or not
    overflows = 0  # a socket's audio waits in its queue: none is lost before it

    def __init__(self) -> None:
        import av

        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        self._pieces: queue.Queue[np.ndarray | None] = queue.Queue()
        self._odd = b""  # a byte left over from a message of odd length
        self._sent = 0  # input samples so far (the frames' timestamps)
        self.seconds = 0.0  # of input received

    def append(self, pcm: bytes) -> None:
        """One `input_audio_buffer.append`'s audio (on the socket's thread), for `run`."""
        self._pieces.put(self.convert(pcm))

    def convert(self, pcm: bytes) -> np.ndarray:
        """PCM16 at 24 kHz as 16 kHz float32 samples (a message's odd byte kept for the
        next)."""
        pcm, self._odd = (self._odd + pcm), b""
        if len(pcm) % 2:
            pcm, self._odd = pcm[:-1], pcm[-1:]
        if not pcm:
            return np.zeros(0, np.float32)
        samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
        self.seconds += samples.shape[1] / INPUT_RATE
        return self._resample(samples)

    def end(self) -> None:
        self._pieces.put(self._resample(None))
        self._pieces.put(None)

    def _resample(self, samples: np.ndarray | None) -> np.ndarray:
        import av

        frame = None
        if samples is not None:
            frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate, frame.pts = INPUT_RATE, self._sent
            self._sent += samples.shape[1]
        out = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)

    def run(self, emit: Emit, stopped: threading.Event) -> None:
        held = np.zeros(0, dtype=np.float32)
        while not stopped.is_set():
            try:
                piece = self._pieces.get(timeout=0.1)
            except queue.Empty:
                continue
            if piece is None:
                break
            held = np.concatenate([held, piece])
            while held.size >= _CHUNK:
                emit(held[:_CHUNK].copy())
                held = held[_CHUNK:]
        if held.size and not stopped.is_set():
            emit(held)
