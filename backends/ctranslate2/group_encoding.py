"""A batch's encoder output: each chunk's log-mel, the encoder (onnxruntime's or
CTranslate2's, backends/ctranslate2/encoder.py), and rows encoded before their batch.

A run that detects its language encodes the first chunk to do it (`detect_language`), the
same window that chunk's batch would encode again: French with base, 0.17 s of a 4.5 s run
on 2 cores. The row is kept (`EncodedAhead`) and the batch takes it instead.

Where the encoder is onnxruntime's and the rows are shared out over replicas, a batch is
not encoded before its decode: each replica encodes its own share's rows, a window at a
time on one thread, and decodes them at once (`SpreadRows`), so a replica whose share is
encoded first starts decoding while the other still encodes (French with base, 7 rows on 2
cores: one waited 0.3 s for the other). Rows are dealt whole, so of an odd number one
replica has a row's work more: the other encodes one of its rows before its own
(`SpreadRows.queues`). Per window, two windows at once on one thread each
took about as long as one at a time on both threads on 2 cores of an AMD EPYC; the wait
saved is the gain.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.audio.stream import Samples
from kvscribe.backends.ctranslate2.encoder import OnnxEncodedModel, OnnxEncoder
from kvscribe.backends.ctranslate2.replicas import Replicas, rows_of
from kvscribe.chunking import Chunk

STAGE_FEATURES, STAGE_ENCODER = "features", "encoder"  # the stats' time by stage


class EncodedAhead:
    """Encoder rows (a chunk's `[1, frames / 2, d_model]`, in host memory) made before their
    batch, each taken once. At most `limit` are held: a folder of short files detects every
    file's language before its first batch, and a row not held is simply encoded again."""

    def __init__(self, limit: int):
        self._rows: dict[Chunk, np.ndarray] = {}
        self._limit = limit

    def keep(self, chunk: Chunk, row: np.ndarray) -> None:
        if len(self._rows) < self._limit:
            self._rows[chunk] = row

    def take(self, chunk: Chunk) -> np.ndarray | None:
        return self._rows.pop(chunk, None)

    def __len__(self) -> int:
        return len(self._rows)


def chunk_features(engine, audio: Samples, chunk: Chunk) -> np.ndarray:
    """The chunk's log-mel, padded (in the feature domain, as faster-whisper does) to 30 s."""
    return adapter.window_features(engine, chunk.samples(audio))


def encode_windows(replicas: Replicas, features: np.ndarray):
    """The group's encoder output. On onnxruntime (backends/ctranslate2/encoder.py) the
    windows go one at a time through its one session, on every thread. On CTranslate2's
    CPU encoder a window at a time, the replicas taking one each (a lone window goes to
    the every-thread engine, which that choice loads with the model): the encoder's
    attention scratch grows with the windows encoded together (tiny, 8 windows: about
    0.4 GB more peak RSS) while the work is the same, and a short file would otherwise
    peak lower than a long one only because it fills fewer rows. On a GPU the batch stays
    whole."""
    import ctranslate2

    engine = replicas.engine
    if engine.model.device != "cpu" or isinstance(engine.model, OnnxEncodedModel):
        return adapter.encode(engine, features)
    if len(features) == 1 and replicas.whole_started:
        return adapter.encode(replicas.whole, features)
    rows = replicas.map(
        lambda window: np.asarray(adapter.encode(engine, window[None])), list(features)
    )
    return ctranslate2.StorageView.from_array(np.concatenate(rows))


def detect_language(
    replicas: Replicas, audio: Samples, chunk: Chunk, ahead: EncodedAhead | None
) -> tuple[str, float]:
    """The language Whisper hears in `chunk` and its probability (faster-whisper's
    `detect_language` on one window), its encoder row kept in `ahead` on a CPU."""
    engine = replicas.engine
    encoded = encode_windows(replicas, chunk_features(engine, audio, chunk)[None])
    if ahead is not None and encoded.device == "cpu":
        ahead.keep(chunk, np.asarray(encoded))
    token, probability = engine.model.detect_language(encoded)[0][0]
    return token[2:-2], float(probability)  # "<|fr|>" -> "fr"


def encode_group(
    replicas: Replicas,
    audios: Sequence[Samples],
    group: list[Chunk],
    ahead: EncodedAhead | None,
    stage,
):
    """`group`'s encoder output, one row per chunk (a chunk of `audios[chunk.source]`): the
    rows `ahead` holds, the others' features computed and encoded. `stage(name)`: a context
    that times the features and the encoder."""
    import ctranslate2

    kept = [ahead.take(chunk) if ahead else None for chunk in group]
    missing = [row for row, found in enumerate(kept) if found is None]
    encoded = None
    if missing:
        engine = replicas.engine
        with stage(STAGE_FEATURES):
            features = np.stack(
                [chunk_features(engine, audios[group[row].source], group[row]) for row in missing]
            )
        with stage(STAGE_ENCODER):
            encoded = encode_windows(replicas, features)
        if len(missing) == len(group):
            return encoded
        for row, window in zip(missing, np.asarray(encoded), strict=True):
            kept[row] = window[None]
    return ctranslate2.StorageView.from_array(np.concatenate(kept))


# -- a batch's rows, by share ------------------------------------------------------------

# A window's encoding as a share's work, in seconds of audio decoded (the unit the shares
# are dealt in): one window on one core took about as long as the beam search over 10 s
# of French telephone speech (base) and 13 s of English (tiny.en), on 2 cores of an AMD
# EPYC.
ENCODE_WEIGHT = 12.0


class EncodedRows:
    """A batch's encoder output, made before its decode (`encode_group`)."""

    encodes_shares = False

    def __init__(self, encoded):
        self._encoded = encoded

    def queues(self, shares: list[list[int]], seconds: list[float]) -> list[list[int]]:
        """Nothing for any replica to encode: every row is encoded already."""
        return [[] for _ in shares]

    def encode(self, queue: list[int]) -> None:
        """Nothing to do: every row is encoded already."""

    def wait_for(self, share: list[int]) -> None:
        """Nothing to wait for."""

    def fail(self, error: BaseException) -> None:
        """Nothing waits on these rows."""

    def of(self, rows: list[int]):
        """Those rows as a StorageView in host memory."""
        return rows_of(self._encoded, rows)

    def weights(self, seconds: list[float]) -> list[float]:
        """Each row's work for the shares: its decode, by its seconds of audio."""
        return list(seconds)


class SpreadRows:
    """A batch's encoder rows, each encoded (its features too) on the thread of a replica,
    on onnxruntime's one-thread session; rows kept ahead are taken. A share's rows are
    encoded by its own replica, except those `queues` moves to a replica with less work: a
    share decodes once all its rows are encoded, wherever (`wait_for`)."""

    encodes_shares = True

    def __init__(
        self,
        encoder: OnnxEncoder,
        engine,
        audios: Sequence[Samples],
        group: list[Chunk],
        ahead: EncodedAhead | None,
    ):
        self._encoder, self._engine, self._audios, self._group = encoder, engine, audios, group
        self._rows = [ahead.take(chunk) if ahead else None for chunk in group]
        self._encoded = threading.Condition()
        self._failed: BaseException | None = None

    def queues(self, shares: list[list[int]], seconds: list[float]) -> list[list[int]]:
        """The rows each share's replica encodes, in order. Rows are dealt whole (a row's
        encoding and its decode), so an odd row leaves one replica a row's work more (7
        rows on 2 cores: 4 and 3); here the heaviest share's last encodes move to the
        lightest, first in its queue, while that lowers the heaviest load (7 rows of equal
        length: the other replica encodes two of the 4 before its own 3), so the share
        that decodes more rows starts decoding sooner; no more of a share's encodes move
        than it keeps, so its replica never waits for them (of 5 rows, 3 and 2: one moves;
        with two, the 3's replica sat 0.17 s waiting on the telephone recording)."""
        own = [[row for row in share if self._rows[row] is None] for share in shares]
        weights = self.weights(seconds)
        load = [sum(weights[row] for row in share) for share in shares]
        moved: list[list[int]] = [[] for _ in shares]
        moved_out = [0] * len(shares)
        while True:
            heavy, light = load.index(max(load)), load.index(min(load))
            if load[heavy] - load[light] <= ENCODE_WEIGHT:
                break  # moving one more encode would not lower the heaviest load
            if moved_out[heavy] + 1 > len(own[heavy]) - 1:
                break  # its replica would finish its own encodes first and wait
            moved[light].append(own[heavy].pop())
            moved_out[heavy] += 1
            load[heavy] -= ENCODE_WEIGHT
            load[light] += ENCODE_WEIGHT
        return [first + rest for first, rest in zip(moved, own, strict=True)]

    def encode(self, queue: list[int]) -> None:
        for row in queue:
            chunk = self._group[row]
            features = chunk_features(self._engine, self._audios[chunk.source], chunk)
            encoded = self._encoder.encode_here(features)
            with self._encoded:
                self._rows[row] = encoded
                self._encoded.notify_all()

    def wait_for(self, share: list[int]) -> None:
        """Until every row of `share` is encoded (some by another replica); raises what
        stopped another replica's encoding."""
        with self._encoded:
            while self._failed is None and any(self._rows[row] is None for row in share):
                self._encoded.wait()
            if self._failed is not None and any(self._rows[row] is None for row in share):
                raise RuntimeError("another replica's encoding failed") from self._failed

    def fail(self, error: BaseException) -> None:
        """A replica's encoding stopped with `error`: no row it had left comes."""
        with self._encoded:
            self._failed = error
            self._encoded.notify_all()

    def of(self, rows: list[int]):
        import ctranslate2

        with self._encoded:
            picked = [self._rows[row] for row in rows]
        return ctranslate2.StorageView.from_array(np.concatenate(picked))

    def weights(self, seconds: list[float]) -> list[float]:
        """Each row's work for the shares: its decode and, unless kept ahead, its encoding."""
        kept = [row is not None for row in self._rows]
        return [
            s + (0.0 if ahead else ENCODE_WEIGHT) for s, ahead in zip(seconds, kept, strict=True)
        ]


def encode_alone(replicas: Replicas, features: np.ndarray):
    """One window's encoder output (`features`: `[n_mels, frames]`) on the calling thread
    alone, the other cores busy with other rows: onnxruntime's one-thread session, or
    CTranslate2 on a free single-thread replica."""
    import ctranslate2

    model = replicas.engine.model
    if isinstance(model, OnnxEncodedModel):
        return ctranslate2.StorageView.from_array(model.encoder.encode_here(features))
    return adapter.encode(replicas.engine, features[None])


def spread_encoder(replicas: Replicas) -> OnnxEncoder | None:
    """onnxruntime's encoder where a batch's rows are encoded by the replicas that decode
    them (SpreadRows), else None (CTranslate2's encoder, or no replicas)."""
    model = replicas.engine.model
    if isinstance(model, OnnxEncodedModel) and replicas.workers > 1:
        return model.encoder
    return None
