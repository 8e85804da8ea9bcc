"""Sampled decoding (the temperature fallback) on a generator that starts afresh for each
row, so a row's samples depend on nothing but the row.

CTranslate2 draws samples from one generator per engine thread, seeded (from
`ctranslate2.set_random_seed`) when that thread first samples and never again, and a
call of several rows draws them one after another. On a long-lived engine a window that
falls back therefore samples other text after other work: the server's second request for
the same file, a batch folder's second file, or a short request sharing a batch with
others could each read differently. A model loaded anew has threads of its own, whose
generator starts at the seed: each sampled row decoded alone on such a load gives the same
text whatever ran before or beside it. Only rows that fall back pay for the load, beside
the `best_of` sampled hypotheses it then decodes. CPU only: on a GPU sampled rows still run
on the one engine (backends/ctranslate2/replicas.py).
"""

from __future__ import annotations

from collections.abc import Callable


def is_sampled(options: dict) -> bool:
    """Whether a `generate` call draws samples (CTranslate2's `sampling_topk` 1 is the best
    token, its default)."""
    return options.get("sampling_topk", 1) != 1


class FreshSamples:
    """A CTranslate2 Whisper model whose sampled `generate` calls run a row at a time, each
    on a model `load()` makes for it and drops after; every other call goes to `model`
    (`inner`)."""

    def __init__(self, model, load: Callable[[], object]):
        self.inner, self._load = model, load

    def generate(self, features, prompts, **options):
        if not is_sampled(options):
            return self.inner.generate(features, prompts, **options)
        if len(prompts) == 1:
            return self._load().generate(features, prompts, **options)
        from kvscribe.backends.ctranslate2.replicas import rows_of

        return [
            self._load().generate(rows_of(features, [row]), [prompt], **options)[0]
            for row, prompt in enumerate(prompts)
        ]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
