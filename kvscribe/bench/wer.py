"""Word error rate after Whisper's English normalisation, pooled over clips."""

from __future__ import annotations

from functools import cache


@cache
def _normalizer():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def words(text: str) -> list[str]:
    return _normalizer()(text).split()


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Substitutions + deletions + insertions (Levenshtein over words)."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, start=1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word))
            )
        previous = current
    return previous[-1]


def pooled_wer(pairs: list[tuple[str, str]]) -> float:
    """Errors over reference words, summed over every (reference, hypothesis) pair."""
    errors = total = 0
    for reference, hypothesis in pairs:
        ref = words(reference)
        errors += edit_distance(ref, words(hypothesis))
        total += len(ref)
    return errors / total if total else 0.0
