"""A screenshot of the page `kvscribe serve` answers at /, taken while the server is busy.

    .venv/bin/python benchmarks/page_screenshot.py [--sessions 2] [--seconds 20]

Starts `kvscribe serve` (defaults, no key, 127.0.0.1), opens the page in a headless
Chromium (Debian's chromium and chromium-driver, through Selenium) whose fake capture
device plays samples/jfk.wav, clicks Record, and meanwhile runs `--sessions` realtime
sessions streaming the joined real clips in real time (benchmarks/realtime_sessions.py's
client) and one client sending the eval's short real clips as file requests. After
`--seconds` it saves the page as docs/images/page_under_load.png, and the server's
/metrics at that moment in benchmarks/results/page_under_load.{json,md}.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import results_file
from realtime_sessions import CLIPS, SHORTS, offline, pcm24, session

from kvscribe.audio import SAMPLE_RATE, load_audio
from tests.serving import Served

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images" / "page_under_load.png"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory() as work:
        server = Served(Path(work), key=None)
        stop = threading.Event()

        def files() -> None:
            turn = 0
            while not stop.is_set():
                offline(server, SHORTS[turn % len(SHORTS)])
                turn += 1

        joined = CLIPS["joined"]
        pcm, seconds = pcm24(joined), load_audio(joined).size / SAMPLE_RATE
        workers = [threading.Thread(target=files, daemon=True)]
        workers += [
            threading.Thread(target=session, args=(server, pcm, seconds), daemon=True)
            for _ in range(args.sessions)
        ]
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={ROOT / 'samples' / 'jfk.wav'}%noloop",
            "--window-size=1280,760",
        ):
            options.add_argument(argument)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            driver.get(f"{server.url}/")
            for worker in workers:
                worker.start()
            time.sleep(2)
            driver.find_element("id", "record").click()
            time.sleep(args.seconds)
            OUT.parent.mkdir(parents=True, exist_ok=True)
            figures = server.metrics()
            driver.save_screenshot(str(OUT))
            print(f"wrote {OUT.relative_to(ROOT)}")
            shown = {k: v for k, v in figures.items() if "_bucket" not in k}
            markdown = "\n".join(
                [
                    f"/metrics when {OUT.relative_to(ROOT)} was taken: {args.sessions} "
                    "realtime sessions streaming the joined real clips, one client sending "
                    "file requests, the page recording JFK.",
                    "",
                    "| figure | value |",
                    "|---|---|",
                    *(f"| `{k}` | {v:g} |" for k, v in sorted(shown.items())),
                ]
            )
            meta = {"device": "cpu", "sessions": args.sessions, "seconds": args.seconds}
            results_file.write("page_under_load", meta, [shown], markdown)
        finally:
            stop.set()
            driver.quit()
            server.stop()


if __name__ == "__main__":
    main()
