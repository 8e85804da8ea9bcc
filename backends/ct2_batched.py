"""Batched decoding on CTranslate2: kvscribe's speech chunks through one `generate` call per
batch, with faster-whisper's feature extractor, prompt and suppression rules.

Not faster-whisper's `BatchedInferencePipeline`: that drops the text after a chunk's last
timestamp pair (it seeks as a sequential window would, but a chunk is never revisited),
and this path shares kvscribe's chunker and segment rules with the transformers backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvscribe.chunking import Chunk, ChunkResult

MAX_INITIAL_TIMESTAMP_INDEX = 50  # the first timestamp is at most 1.00 s (faster-whisper's rule)


@dataclass(frozen=True)
class BatchSetup:
    engine: object  # faster_whisper.WhisperModel
    prompt: list[int]
    suppress: list[int]
    beams: int
    batch: int


def setup(engine, language: str, task: str, prompt_text: str | None, beams: int, batch: int):
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    tokenizer = Tokenizer(engine.hf_tokenizer, engine.model.is_multilingual, task, language)
    previous = tokenizer.encode(" " + prompt_text.strip()) if prompt_text else []
    prompt = engine.get_prompt(tokenizer, previous_tokens=previous, without_timestamps=False)
    suppress = get_suppressed_tokens(tokenizer, [-1])
    return BatchSetup(engine, prompt, suppress, beams, batch), tokenizer


def chunk_features(engine, audio: np.ndarray, chunk: Chunk) -> np.ndarray:
    """The chunk's log-mel, padded (in the feature domain, as faster-whisper does) to 30 s."""
    from faster_whisper.audio import pad_or_trim

    return pad_or_trim(engine.feature_extractor(audio[chunk.start : chunk.end])[..., :-1])


def decode_group(plan: BatchSetup, audio: np.ndarray, group: list[Chunk]) -> list[ChunkResult]:
    """Encode and decode `group` (at most `plan.batch` chunks) in one batch."""
    engine = plan.engine
    features = np.stack([chunk_features(engine, audio, chunk) for chunk in group])
    results = engine.model.generate(
        engine.encode(features),
        [list(plan.prompt) for _ in group],
        beam_size=plan.beams,
        max_length=engine.max_length,
        suppress_blank=True,
        suppress_tokens=plan.suppress,
        return_scores=True,
        return_no_speech_prob=True,
        max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
    )
    decoded = []
    for result in results:
        tokens = list(result.sequences_ids[0])
        total_logprob = result.scores[0] * len(tokens)  # scores are length-normalised
        decoded.append(
            ChunkResult(tokens, total_logprob / (len(tokens) + 1), result.no_speech_prob)
        )
    return decoded
