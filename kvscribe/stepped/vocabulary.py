"""A transformers Whisper checkpoint's tokens, as the engines kvscribe steps use them: the
tokenizer, the special tokens, the model's own suppressed list and the start-of-transcript
sequence. Reads tokenizer.json and generation_config.json; imports no torch."""

from __future__ import annotations

import json
from pathlib import Path

from kvscribe.models.vocab import SpecialTokens, special_tokens_of


class Vocabulary:
    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.special: SpecialTokens = special_tokens_of(self.tokenizer)
        generation = json.loads((model_dir / "generation_config.json").read_text())
        self.own_suppressed = list(generation.get("suppress_tokens") or [])

    def text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=False)

    def prompt_tokens(self, text: str | None) -> list[int]:
        """Prompt text as tokens, with the leading space Whisper's prompts get."""
        if not text:
            return []
        return self.tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids

    def suppressed(self, requested: tuple[int, ...]) -> list[int]:
        """The ids never sampled: those asked for, with -1 standing for the model's own list
        (generation_config.json's suppress_tokens), as openai-whisper reads it."""
        own = self.own_suppressed if -1 in requested else []
        return sorted({*own, *(token for token in requested if token >= 0)})

    def sot_sequence(self, language: str, task: str) -> tuple[int, ...]:
        """<|startoftranscript|>, and on a multilingual model the language and the task."""
        special = self.special
        if not special.is_multilingual:
            return (special.sot,)
        task_token = special.translate if task == "translate" else special.transcribe
        return (special.sot, special.languages[language], task_token)
