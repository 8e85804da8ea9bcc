"""Whisper's special token ids, read from a model's tokenizer.json (never hard-coded:
English-only and multilingual vocabularies are offset by one)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SpecialTokens:
    eot: int
    sot: int
    translate: int
    transcribe: int
    sot_prev: int
    no_speech: int
    no_timestamps: int
    languages: dict[str, int]  # "en" -> id of <|en|>

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1

    @property
    def is_multilingual(self) -> bool:
        return self.eot == 50257


def special_tokens(tokenizer_json: Path) -> SpecialTokens:
    added = json.loads(tokenizer_json.read_text(encoding="utf-8"))["added_tokens"]
    return _from_added({token["content"]: token["id"] for token in added})


def special_tokens_of(tokenizer) -> SpecialTokens:
    """The same, from a loaded `tokenizers.Tokenizer`: no second parse of its file (30 ms)."""
    added = tokenizer.get_added_tokens_decoder()
    return _from_added({token.content: token_id for token_id, token in added.items()})


def _from_added(ids: dict[str, int]) -> SpecialTokens:
    """Whisper's special tokens among a tokenizer's added tokens (content -> id)."""
    sot, translate = ids["<|startoftranscript|>"], ids["<|translate|>"]
    languages = {
        content[2:-2]: token_id
        for content, token_id in ids.items()
        if sot < token_id < translate and content.startswith("<|")
    }
    return SpecialTokens(
        eot=ids["<|endoftext|>"],
        sot=sot,
        translate=translate,
        transcribe=ids["<|transcribe|>"],
        sot_prev=ids["<|startofprev|>"],
        no_speech=ids.get("<|nospeech|>", ids.get("<|nocaptions|>", -1)),
        no_timestamps=ids["<|notimestamps|>"],
        languages=languages,
    )
