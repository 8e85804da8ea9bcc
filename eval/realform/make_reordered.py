"""Builds asterisk_LANG_reordered_SEED.wav: the dev part's prompts (even-numbered, as
make_asterisk.py takes them) of Debian's asterisk-core-sounds-LANG-wav in another seeded order,
joined by short pauses (0.15-0.35 s of digital silence, under the 0.3 s that ends a speech
region in a file, so prompts run on into regions longer than Whisper's window and batched
decoding must cut them mid-phrase), until 90 s of speech. 8 kHz telephone audio, its
reference beside it.
usage: python make_reordered.py SOUNDS_DIR DOC_DIR OUT_DIR LANG SEED"""
import gzip, random, re, sys, wave
from pathlib import Path

from asterisk_prompts import said

sounds, docs, out, lang, seed = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
voice = {"en": "en_US_f_Allison", "es": "es_MX_f_Allison", "fr": "fr_CA_f_June",
         "it": "it_IT_m_Carlo", "ru": "ru_RU_f_IvrvoiceRU"}[lang]
prompts = []
for line in gzip.open(docs / f"asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz", "rt", encoding="utf-8", errors="replace"):
    m = re.match(r"^([\w\-/]+):\s*(.+)$", line.strip())
    if m and "[" not in m.group(2) and len(m.group(2).split()) >= 3 and (sounds / voice / (m.group(1) + ".wav")).exists() and said(lang, m.group(1), m.group(2)):
        prompts.append((m.group(1), m.group(2).strip()))
prompts.sort()
dev = prompts[0::2]
rng = random.Random(f"skip-{seed}")
rng.shuffle(dev)
frames, texts, seconds = [b"\0\0" * 2400], [], 0.0
for name, text in dev:
    w = wave.open(str(sounds / voice / (name + ".wav")))
    assert w.getframerate() == 8000 and w.getnchannels() == 1 and w.getsampwidth() == 2, name
    frames += [w.readframes(w.getnframes()), b"\0\0" * int(8000 * rng.uniform(0.15, 0.35))]
    texts.append(text)
    seconds += w.getnframes() / 8000
    if seconds > 90:
        break
stem = out / f"asterisk_{lang}_reordered_{seed}"
o = wave.open(str(stem) + ".wav", "wb"); o.setnchannels(1); o.setsampwidth(2); o.setframerate(8000)
o.writeframes(b"".join(frames)); o.close()
Path(str(stem) + ".txt").write_text(" ".join(texts) + "\n", encoding="utf-8")
print(stem.name, round(seconds, 1), "s of speech", len(texts), "prompts")
