"""Prompts of Debian's asterisk-core-sounds whose transcript does not say what the recording
does, left out of the recordings made from them (make_asterisk.py, make_reordered.py).
English marks a sound with brackets ("<beep ascending>", "[this is a simple beep tone]"),
which the makers skip; the Italian and Russian transcripts also spell sounds out, note the
translator's doubts or the silence a file holds in parentheses ("(10 secondi di silenzio)",
"(voce alternativa ...)"), run one prompt's text on into the next ones', or the voice left a
sentence unread. Each listed here was checked by decoding the prompt alone with
faster-whisper and kvscribe, or by reading the transcript's line."""

UNSAID = {
    "it": {
        "beep": "a beep, written as 'un suono beep'",
        "beeperr": "an error beep, written as 'un suono beep di errore'",
        "confbridge-join": "a rising beep, written as 'un suono di beep ascendente'",
        "confbridge-leave": "a falling beep, written as 'un suono di beep discendente'",
        "confbridge-mute-extended": "its line runs on into three other prompts' text",
        "demo-instruct": "the recording starts at its second sentence, 'Se desideri testare'",
    },
    "ru": {
        "conf-adminmenu": "its line repeats the prompt's name before the text",
    },
}


# Where a parenthesis is a note, not words said. The eval's English and French transcripts
# have parentheses that are said, or were kept: their recordings stay as they were made.
NOTES_IN_PARENTHESES = {"it", "ru"}


def said(lang: str, name: str, text: str) -> bool:
    """Whether `text` is what the prompt `name` says: not listed above, and in Italian and
    Russian no note in parentheses."""
    noted = lang in NOTES_IN_PARENTHESES and "(" in text
    return name not in UNSAID.get(lang, {}) and not noted
