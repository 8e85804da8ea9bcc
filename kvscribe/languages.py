"""Language names as openai-whisper takes them (`--language English`), mapped to the codes
every backend takes. The names and aliases are openai-whisper's (whisper/tokenizer.py,
TO_LANGUAGE_CODE; MIT licence), lower-cased there and matched without case here."""

from __future__ import annotations

from collections.abc import Sequence

from kvscribe.errors import UsageError

NAME_TO_CODE = {
    "afrikaans": "af",
    "amharic": "am",
    "arabic": "ar",
    "assamese": "as",
    "azerbaijani": "az",
    "bashkir": "ba",
    "belarusian": "be",
    "bulgarian": "bg",
    "bengali": "bn",
    "tibetan": "bo",
    "breton": "br",
    "bosnian": "bs",
    "catalan": "ca",
    "valencian": "ca",
    "czech": "cs",
    "welsh": "cy",
    "danish": "da",
    "german": "de",
    "greek": "el",
    "english": "en",
    "castilian": "es",
    "spanish": "es",
    "estonian": "et",
    "basque": "eu",
    "persian": "fa",
    "finnish": "fi",
    "faroese": "fo",
    "french": "fr",
    "galician": "gl",
    "gujarati": "gu",
    "hausa": "ha",
    "hawaiian": "haw",
    "hebrew": "he",
    "hindi": "hi",
    "croatian": "hr",
    "haitian": "ht",
    "haitian creole": "ht",
    "hungarian": "hu",
    "armenian": "hy",
    "indonesian": "id",
    "icelandic": "is",
    "italian": "it",
    "japanese": "ja",
    "javanese": "jw",
    "georgian": "ka",
    "kazakh": "kk",
    "khmer": "km",
    "kannada": "kn",
    "korean": "ko",
    "latin": "la",
    "letzeburgesch": "lb",
    "luxembourgish": "lb",
    "lingala": "ln",
    "lao": "lo",
    "lithuanian": "lt",
    "latvian": "lv",
    "malagasy": "mg",
    "maori": "mi",
    "macedonian": "mk",
    "malayalam": "ml",
    "mongolian": "mn",
    "marathi": "mr",
    "malay": "ms",
    "maltese": "mt",
    "burmese": "my",
    "myanmar": "my",
    "nepali": "ne",
    "dutch": "nl",
    "flemish": "nl",
    "nynorsk": "nn",
    "norwegian": "no",
    "occitan": "oc",
    "panjabi": "pa",
    "punjabi": "pa",
    "polish": "pl",
    "pashto": "ps",
    "pushto": "ps",
    "portuguese": "pt",
    "moldavian": "ro",
    "moldovan": "ro",
    "romanian": "ro",
    "russian": "ru",
    "sanskrit": "sa",
    "sindhi": "sd",
    "sinhala": "si",
    "sinhalese": "si",
    "slovak": "sk",
    "slovenian": "sl",
    "shona": "sn",
    "somali": "so",
    "albanian": "sq",
    "serbian": "sr",
    "sundanese": "su",
    "swedish": "sv",
    "swahili": "sw",
    "tamil": "ta",
    "telugu": "te",
    "tajik": "tg",
    "thai": "th",
    "turkmen": "tk",
    "tagalog": "tl",
    "turkish": "tr",
    "tatar": "tt",
    "ukrainian": "uk",
    "urdu": "ur",
    "uzbek": "uz",
    "vietnamese": "vi",
    "yiddish": "yi",
    "yoruba": "yo",
    "cantonese": "yue",
    "chinese": "zh",
    "mandarin": "zh",
}


WHISPER_CODES = frozenset(NAME_TO_CODE.values())  # every language code Whisper knows
# The codes an unknown one's hint names, in Whisper's token order (its most trained first).
_EXAMPLES = ("en", "zh", "de", "es", "ru", "ko", "fr", "ja")


def unknown_code(
    code: str, known: Sequence[str] = _EXAMPLES, english_only: bool = False
) -> UsageError:
    """The error for a language code the model does not know: its hint names the choices,
    not the command line's flags (the server words its errors from them too)."""
    hint = (
        "this model takes en (English) only: use en, or omit it"
        if english_only
        else f"use a code such as {', '.join(known[:8])}, ..., a name such as English, or omit it"
    )
    return UsageError(f"unknown language code {code!r}", subject="--language", hint=hint)


def refuse_unknown(code: str | None) -> None:
    """A code no Whisper model knows, refused before a model loads (the transformers
    backend's PyTorch alone costs seconds); which codes a model takes is its backend's
    check (backends/base.py)."""
    if code is not None and code not in WHISPER_CODES:
        raise unknown_code(code)


def language_code(value: str | None) -> str | None:
    """`value` as a language code: a name (any case) becomes its code; a code, or anything
    else, lower-cased (the backend says which codes its model knows)."""
    if value is None:
        return None
    key = value.strip().lower()
    return NAME_TO_CODE.get(key, key)


def language_name(code: str) -> str:
    """openai-whisper's name of a language code (en -> english); the code itself when it
    has none."""
    return next((name for name, known in NAME_TO_CODE.items() if known == code), code)
