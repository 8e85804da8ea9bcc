"""Voice activity for files and live mode alike: the silero front end and its hysteresis
(silero.py), a file's speech regions (regions.py) and its runs of digital silence
(digital_silence.py)."""
