"""A live session: audio chunks -> voice activity -> per-utterance re-decoding -> committed text.

Within an utterance the buffer (from its onset) is re-decoded every `step` seconds of new
audio and LocalAgreement commits what two decodes in a row agree on. When speech pauses, the
buffer is decoded again; after `commit_silence` of quiet that hypothesis is committed,
while the utterance stays open in case speech resumes (the voice detector ends it only after
`min_silence`, and an utterance too short to read alone waits for that end). At the end the
final hypothesis commits the rest. At either, its unsure last words (read under an even
chance, decoded without the speech after them) wait: where speech follows within
`hold_unsure` of the end, the utterance goes on and reads them again with it. The next
utterance's buffer starts with up to `context` seconds of the speech before it, as a file
run reads a phrase beside its neighbours; the words the decoder places there are not
committed again (docs/live.md, "How it works").
Every decode builds its own decoder cache: nothing carries over but audio.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.backends.base import Backend
from kvscribe.contract import DecodeRequest
from kvscribe.live.agreement import Hypothesis, LocalAgreement
from kvscribe.live.capture import Capture, Chunk
from kvscribe.live.stats import LiveStats
from kvscribe.live.streaming import LiveListener, StreamSettings, decode_request
from kvscribe.live.utterance import Utterance
from kvscribe.voice.silero import VoiceDetector, VoiceEvent, level_dbfs

_MEMORY_EVERY = 10.0  # seconds of audio between RSS samples
_SLACK = SAMPLE_RATE // 2  # audio kept before a possible onset, beyond the pad
# A decode whose timed words stop this long before the speech in its buffer does has dropped
# the rest: Whisper may end a window at a lone timestamp and skip the speech after it (the
# realform English recording: "... the audio volume from other", "participants" unread,
# though a file run reads it). The rest is decoded again, prompted with what was read.
_UNCOVERED_SECONDS = 0.4


class LiveSession:
    def __init__(
        self,
        backend: Backend,
        request: DecodeRequest,
        capture: Capture,
        detector: VoiceDetector,
        listener: LiveListener,
        stats: LiveStats,
        settings: StreamSettings,
    ):
        self.backend, self.request, self.capture = backend, request, capture
        self.detector, self.listener = detector, listener
        self.stats, self.settings = stats, settings
        self._pad = int(settings.vad.pad * SAMPLE_RATE)
        self._step = int(settings.step * SAMPLE_RATE)
        self._settle_after = int(settings.commit_after * SAMPLE_RATE)
        self._heard = int(settings.pause_heard * SAMPLE_RATE)
        self._short = int(settings.vad.min_utterance * SAMPLE_RATE)
        self._blip = int(settings.vad.min_speech * SAMPLE_RATE)  # what the detector discards
        self._stop = threading.Event()
        self._audio = np.zeros(0, dtype=np.float32)  # recent stream audio from `_origin`
        self._origin = 0
        self._received = 0
        self._arrivals: deque[tuple[int, float]] = deque()  # (end sample, arrival) per chunk
        self._utterance: Utterance | None = None
        self._next_memory_sample = 0.0
        self._language: str | None = None  # the first utterance's, then pinned
        # Where a next utterance's buffer may start: the last utterance's `starts`.
        self._context: tuple[int, ...] = ()
        self._context_words: list[str] = []  # and the words it committed
        self._ending = False  # the audio has ended: an utterance's end holds nothing back
        self._hold_for = int(settings.hold_unsure * SAMPLE_RATE)

    def stop(self) -> None:
        """Finish soon: the pending utterance is decoded and committed (safe from a signal
        handler)."""
        self._stop.set()

    def run(self) -> LiveStats:
        self.capture.start()
        try:
            while not self._stop.is_set():
                try:
                    chunk = self.capture.get(timeout=0.1)
                except EOFError:
                    break
                if chunk is not None:
                    self._process(chunk, decode=True)
            self.capture.stop()
            self._drain()
            self._end_of_audio()
        finally:
            self.capture.close()
            self._count_lost_audio()
            self.stats.finish()
        self.capture.raise_failure()  # a source that failed part-way, once what it gave is done
        return self.stats

    # -- per chunk ---------------------------------------------------------------------------

    def _process(self, chunk: Chunk, decode: bool) -> None:
        busy = time.perf_counter()
        self._append(chunk)
        speaking = self.detector.in_speech
        for event in self.detector.feed(chunk.samples):
            self._on_event(event)
        self._count_lost_audio()
        self.listener.heard(level_dbfs(chunk.samples), speaking)
        if decode and self._decode_due():
            self._redecode()
        if decode and self._settle_due():
            self._settle()
        if self._hold_expired():
            self._release()
        self._forget_old_audio()
        self.stats.busy_seconds += time.perf_counter() - busy
        if self.stats.audio_seconds >= self._next_memory_sample:
            self.stats.sample_memory()
            self._next_memory_sample += _MEMORY_EVERY

    def _count_lost_audio(self) -> None:
        self.stats.dropped_seconds = self.capture.dropped_seconds
        self.stats.input_overflows = self.capture.device_overflows

    def _append(self, chunk: Chunk) -> None:
        self._audio = np.concatenate([self._audio, chunk.samples])
        self._received += chunk.samples.size
        self._arrivals.append((self._received, chunk.arrived))
        self.stats.audio_seconds = self._received / SAMPLE_RATE

    def _on_event(self, event: VoiceEvent) -> None:
        held = self._utterance
        if event.kind == "start" and held is not None and held.held_since is not None:
            held.resume_held(event.sample)  # speech continues the held utterance
            self.stats.held_resumed += 1
            return
        if event.kind == "start":
            self._utterance = self._begin(event.sample)
            return
        utterance = self._utterance
        if utterance is None:
            return
        if event.kind == "pause":
            utterance.paused_at = event.sample
        elif event.kind == "resume":
            utterance.resume(event.sample)
        elif event.kind == "end":
            self._finish(event.sample)
        elif utterance.resumed is not None:  # "discard": a blip after a held end
            utterance.unresume()
            self.stats.held_resumed -= 1
        else:  # "discard": too short to be speech
            self._utterance = None
            self.listener.tentative("")

    def _begin(self, onset: int) -> Utterance:
        """A new utterance from `onset`. Its buffer starts with the speech before it, from the
        earliest place that lies within `settings.context` seconds: decoded again, but words
        the decoder ends before the onset are not committed. (Not the middle of the silence
        between: the alignment stretches a last word over the silence after it.)"""
        own = max(self._origin, onset - self._pad)
        utterance = Utterance(start=own, onset=onset, decoded_to=own, starts=[own])
        reach = max(self._origin, onset - int(self.settings.context * SAMPLE_RATE))
        usable = [p for p in self._context if reach <= p < own]
        if usable:
            utterance.start = usable[0]
            utterance.starts = usable + utterance.starts
            heard = (onset - usable[0]) / SAMPLE_RATE
            utterance.agreement = LocalAgreement.after(heard, self._context_words)
        return utterance

    def _decode_due(self) -> bool:
        """Re-decode every `step` of new audio, and as soon as speech pauses (that decode may
        turn out to be the final one). Not again during the pause: silence adds no words, and
        a decode then would hold up the commit or the end that follows. A live source that
        is behind catches up first."""
        utterance = self._utterance
        if utterance is None or (self.capture.source.live and self.capture.waiting()):
            return False
        paused = utterance.paused_at
        if paused is not None:
            return utterance.decoded_to < paused + self._heard <= self._received
        return self._received - utterance.decoded_to >= self._step

    def _settle_due(self) -> bool:
        """Speech has been quiet for `commit_silence`, the decode at the pause has heard it, and
        it is long enough to read: the utterance's speech, with the context before it if any
        (a short utterance with none may still join the next), however its buffer was cut."""
        utterance = self._utterance
        if utterance is None or utterance.settled_at is not None:
            return False
        paused = utterance.paused_at
        heard_from = min(utterance.start, utterance.onset - self._pad)
        return (
            paused is not None
            and not utterance.too_new_to_commit(self._blip, self._received)
            and self._received - paused >= self._settle_after
            and utterance.decoded_to >= paused + self._heard
            and paused - heard_from >= self._short + self._pad
            and utterance.agreement.latest is not None
        )

    # -- decoding ------------------------------------------------------------------------------

    def _decode(self, start: int, stop: int, speech_end: int | None = None) -> Hypothesis:
        """The buffer from stream sample `start` to `stop` read; where the voice detector
        says its speech ends at `speech_end` and the words stop well before, the rest is read
        again (_UNCOVERED_SECONDS)."""
        hypothesis = self._read(start, stop)
        if not (hypothesis.timed and hypothesis.words) or speech_end is None:
            return hypothesis
        covered = start + round(hypothesis.ends[-1] * SAMPLE_RATE)
        if speech_end - covered < _UNCOVERED_SECONDS * SAMPLE_RATE or covered >= stop:
            return hypothesis
        prompt = " ".join(filter(None, [self.request.prompt, *hypothesis.words]))
        # Only the speech and its pad: on the quiet after it, prompted, Whisper may go on
        # with words never said ("Thank you for being here" three times, in real time).
        rest = self._read(covered, min(stop, speech_end + self._pad), prompt)
        self.stats.tails_read_again += 1
        speech = (speech_end - covered) / SAMPLE_RATE
        return hypothesis.followed_by(rest.within(speech), (covered - start) / SAMPLE_RATE)

    def _read(self, start: int, stop: int, prompt: str | None = None) -> Hypothesis:
        samples = self._audio[start - self._origin : stop - self._origin]
        request = decode_request(self.request, samples.size / SAMPLE_RATE)
        if prompt is not None:
            request = dataclasses.replace(request, prompt=prompt)
        started = time.perf_counter()
        run = self.backend.transcribe(samples, request)
        run.report.not_applicable += self.backend.unhonoured(
            self.request, samples.size / SAMPLE_RATE
        )
        segments = list(run.segments)
        self.stats.record_decode(time.perf_counter() - started, run.report)
        self._language = run.language
        return Hypothesis.from_decode(segments)

    def _redecode(self) -> None:
        utterance = self._utterance
        assert utterance is not None
        hypothesis = self._decode(utterance.start, self._received, utterance.paused_at)
        utterance.decoded_to = self._received
        heard = (self._received - utterance.start) / SAMPLE_RATE
        # Whisper rereads the first words of an utterance until it has heard a few seconds.
        hold = self.settings.hold if heard >= self.settings.min_context else float("inf")
        if utterance.too_new_to_commit(self._blip, self._received):
            utterance.agreement.update(hypothesis, float("inf"))  # maybe a blip: wait
        else:
            self._commit(utterance, utterance.agreement.update(hypothesis, hold))
            self._cut_buffer(utterance)
        self.listener.tentative(" ".join(utterance.agreement.tentative))

    def _cut_buffer(self, utterance: Utterance) -> None:
        """Keep the buffer short: the context before the utterance goes once the utterance has
        `alone_after` of its own or the buffer `trim_after`; past `trim_after`, cut after the
        last committed sentence, in the voice detector's pause there; near `max_buffer`, after
        any committed word; at `max_buffer`, commit what the latest hypothesis holds and cut
        wherever it must."""
        s = self.settings
        seconds = (self._received - utterance.start) / SAMPLE_RATE
        own = utterance.onset - self._pad
        grown = (self._received - own) / SAMPLE_RATE >= s.alone_after
        if utterance.start < own and (grown or seconds >= s.trim_after):
            utterance.move_start(0, own)  # every word of the context is committed
            return
        if seconds < s.trim_after:
            return
        agreement = utterance.agreement
        point = agreement.cut_point(sentences_only=seconds < s.max_buffer - 4)
        if point is None and seconds >= s.max_buffer:
            self._commit(utterance, agreement.force(s.hold))
            point = agreement.cut_point(sentences_only=False)
        if point is None:
            return
        count, at = point
        estimate = utterance.start + int(at * SAMPLE_RATE)
        cut = utterance.snap_to_pause(estimate)
        if cut is None:
            if seconds < s.max_buffer:
                return  # the word end is an estimate: wait for a pause to cut in
            cut = estimate
        utterance.move_start(count, min(self._received, max(utterance.start, cut)))

    def _settle(self) -> None:
        """Commit the whole latest hypothesis (decoded after the pause began): what the speaker
        said up to the pause, committed without waiting for the end of the utterance."""
        utterance = self._utterance
        assert utterance is not None and utterance.agreement.latest is not None
        agreement = utterance.agreement
        self._commit(utterance, agreement.finish(agreement.latest, hold_unsure=self._hold_for > 0))
        utterance.settled_at = time.perf_counter()
        self.listener.tentative(" ".join(agreement.tentative))

    def _commit(self, utterance: Utterance, words: list[str]) -> None:
        if words:
            utterance.words.extend(words)
            self.listener.committed(" ".join(words))

    def _finish(self, end: int) -> None:
        """The utterance ended at sample `end`: commit its final hypothesis, but for unsure last
        words while more speech may follow (`_hold_expired`)."""
        utterance = self._utterance
        assert utterance is not None
        latest = utterance.agreement.latest
        if latest is None or utterance.decoded_to < end + self._heard:
            stop = min(self._received, end + max(self._pad, self._heard))
            latest = self._decode(utterance.start, stop, end)
            utterance.decoded_to = stop  # a held end's latest reading heard this far
        hold = self._hold_for > 0 and not self._ending
        added = utterance.agreement.finish(latest, hold_unsure=hold)
        self._commit(utterance, added)
        if utterance.agreement.tentative:
            utterance.held_since = end
            self.stats.held_back += 1
            self.listener.tentative(" ".join(utterance.agreement.tentative))
            return
        self._close(utterance, end, bool(added))

    def _hold_expired(self) -> bool:
        utterance = self._utterance
        if utterance is None or utterance.held_since is None:
            return False
        return self._ending or self._received - utterance.held_since >= self._hold_for

    def _release(self) -> None:
        """No speech followed the held utterance soon enough: commit its unsure last words
        as they were read."""
        utterance = self._utterance
        assert utterance is not None and utterance.held_since is not None
        latest = utterance.agreement.latest
        assert latest is not None
        self._commit(utterance, utterance.agreement.finish(latest))
        self._close(utterance, utterance.held_since, True)

    def _close(self, utterance: Utterance, end: int, added: bool) -> None:
        """The utterance that ended at sample `end` is committed whole; `added`: words were
        committed after any commit at its pause (its latency runs to now)."""
        self._utterance = None
        if self.settings.context > 0:
            self._context = tuple(p for p in utterance.starts if p >= utterance.start)
            self._context_words = utterance.words
        self.listener.tentative("")
        # Committed when the pause settled it, unless the final hypothesis added words since.
        settled = utterance.settled_at if not added else None
        latency = (settled or time.perf_counter()) - self._arrival(end)
        if utterance.words:
            self.stats.record_utterance(latency, committed_at_pause=settled is not None)
            self.listener.utterance_done(" ".join(utterance.words), latency)
        if self.request.language is None and self._language:
            # Detect once: later utterances skip language detection (multilingual models).
            self.request = dataclasses.replace(self.request, language=self._language)

    # -- bookkeeping ---------------------------------------------------------------------------

    def _arrival(self, sample: int) -> float:
        """When the chunk holding stream sample `sample` reached kvscribe."""
        for end, arrived in self._arrivals:
            if end > sample:
                return arrived
        return self._arrivals[-1][1] if self._arrivals else time.perf_counter()

    def _forget_old_audio(self) -> None:
        """Keep only the buffer of the utterance in progress, or the pad before a next one."""
        keep_from = self._received - self._pad - _SLACK
        if self._utterance is not None:
            keep_from = min(keep_from, self._utterance.start)
        else:  # the context a next utterance may use, if it begins soon enough
            reach = self._received - int(self.settings.context * SAMPLE_RATE)
            self._context = tuple(p for p in self._context if p >= reach)
            keep_from = min((keep_from, *self._context))
        drop = keep_from - self._origin
        if drop > 0:
            self._audio = self._audio[drop:]
            self._origin = keep_from
        while self._arrivals and self._arrivals[0][0] <= self._origin:
            self._arrivals.popleft()

    def _drain(self) -> None:
        """After a stop: take what the capture had queued, committing utterances that end in
        it but skipping intermediate re-decodes."""
        while self.capture.waiting():
            try:
                chunk = self.capture.get(timeout=0)
            except EOFError:
                return
            if chunk is not None:
                self._process(chunk, decode=False)

    def _end_of_audio(self) -> None:
        self._ending = True
        event = self.detector.close(self._received)
        if event is not None:
            self._on_event(event)
        if self._hold_expired():
            self._release()
