"""The page `kvscribe serve` answers at /: a real Chromium (headless, driven by Selenium
through Debian's chromedriver) records samples/jfk.wav through its fake capture device into
a realtime session, and uploads a file over the HTTP API, against a real server."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request

import pytest

from tests.conftest import SAMPLE, SAMPLE_TEXT, wer
from tests.serving import KEY, Served, transcribe

pytest.importorskip("starlette")
pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.browser]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT = 60  # seconds a step may take on a loaded machine, at most
# The browser resamples the fake device's audio to the page's 24 kHz and the server to
# 16 kHz, and live mode commits what it heard: at most three of JFK's 22 words may differ
# from the reference (a file run reads them all).
MAX_BROWSER_WER = 0.15


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = Served(tmp_path_factory.mktemp("page"))
    yield served
    assert served.stop() == 0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    problem = _missing()
    if problem:
        if os.environ.get("CI"):  # CI installs the browser: a skip there would hide a gap
            pytest.fail(f"no browser in CI: {problem}")
        pytest.skip(problem)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--use-fake-ui-for-media-stream",  # grant the microphone without asking
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={SAMPLE}%noloop",  # the microphone hears JFK once
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
        "--window-size=1280,800",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _missing() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not shutil.which(path):
            return f"{path} is missing (apt-get install {package})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def _text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.25)


def test_the_page_fetches_nothing_from_elsewhere(server):
    with urllib.request.urlopen(f"{server.url}/", timeout=30) as response:
        assert response.headers["content-type"].startswith("text/html")
        page = response.read().decode()
    assert "<script>" in page and "/v1/realtime" in page and "/v1/audio/transcriptions" in page
    # Every src and href is on this server (or inline): the page works offline.
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", page)
    assert all(not re.match(r"[a-z]+://|//", link) for link in links), links
    assert not re.search(r"""(?:fetch|import)\(\s*["'](?:https?:)?//""", page)


def test_the_browser_records_its_microphone_live_and_uploads_a_file(server, browser):
    browser.get(f"{server.url}/")
    browser.find_element("id", "key").send_keys(KEY)  # the socket takes it as a subprotocol
    _wait_for(lambda: "tiny.en" in _text(browser, "model"), "the model's name")
    time.sleep(1.5)  # the next poll of /metrics carries the key
    browser.get_log("browser")  # read: the calls before the key was typed were refused (401)
    browser.find_element("id", "record").click()
    # JFK ends with "your country": his last words have been committed.
    _wait_for(
        lambda: _text(browser, "live-text").lower().count("country") >= 2,
        f"JFK's words (so far: {_text(browser, 'live-text')!r})",
    )
    browser.find_element("id", "stop").click()
    _wait_for(lambda: _text(browser, "live-status") == "done", "the session to finish")
    heard = _text(browser, "live-text")
    assert wer(SAMPLE_TEXT, heard) <= MAX_BROWSER_WER, heard
    _wait_for(
        lambda: re.search(r"realtime sessions\s+0\b", _text(browser, "figures")),
        "the server to count the session closed",
    )
    browser.find_element("id", "file").send_keys(str(SAMPLE))
    browser.find_element("id", "upload").click()
    _wait_for(lambda: _text(browser, "file-status").startswith("done"), "the upload's text")
    # The streamed text the page shows is what the API answers the same file.
    assert _text(browser, "file-text") == transcribe(server.client(), SAMPLE).text
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_a_refused_session_says_why_on_the_page(tmp_path, browser):
    """The server's one session (--max-sessions 1) is taken: the page says its sessions are
    full and names the option, not "check the key" (a browser cannot read the 429)."""
    from websockets.sync.client import connect

    served = Served(tmp_path, "--max-sessions", "1")
    url = served.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    try:
        with connect(url, additional_headers=served.auth(), open_timeout=30) as taken:
            assert json.loads(taken.recv())["type"] == "session.created"
            browser.get(f"{served.url}/")
            browser.find_element("id", "key").send_keys(KEY)
            _wait_for(lambda: "tiny.en" in _text(browser, "model"), "the model's name")
            browser.find_element("id", "record").click()
            _wait_for(lambda: "refused" in _text(browser, "live-status"), "the refusal")
            said = _text(browser, "live-status")
            assert "1 live sessions are open" in said and "--max-sessions" in said, said
            assert "check the key" not in said
            assert browser.find_element("id", "record").is_enabled()  # free to try again
    finally:
        assert served.stop() == 0
