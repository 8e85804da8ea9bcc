"""Prompts of Debian's asterisk-core-sounds whose transcript does not say what the recording
does, left out of the recordings made from them (make_asterisk.py, make_reordered.py).
English marks a sound with brackets ("<beep ascending>", "[this is a simple beep tone]"),
which the makers skip; these translations spell the sound out, or the voice left a sentence
unread. Each was checked by decoding the prompt alone with faster-whisper and kvscribe."""

UNSAID = {
    "it": {
        "confbridge-join": "a rising beep, written as 'un suono di beep ascendente'",
        "confbridge-leave": "a falling beep, written as 'un suono di beep discendente'",
        "demo-instruct": "the recording starts at its second sentence, 'Se desideri testare'",
    },
}


def said(lang: str, name: str) -> bool:
    return name not in UNSAID.get(lang, {})
