"""The web chat page (roles/services/router/files/chat/) in a real browser: Debian's chromium, driven by
chromedriver through selenium, against tests/chat_fake.py (the page's files, config.json, a
model's streaming OpenAI endpoints behind a team key, Prometheus metrics) on 127.0.0.1.

One headless browser for the module; each test opens the page afresh with empty storage.
Skipped when chromium, chromedriver or selenium is missing (scripts/setup installs them)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from itertools import pairwise

import pytest

from tests.chat_fake import DELTA, MODEL, TEAM_KEY, VERSION, FakeFleet
from tests.conftest import ROOT

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # the test extra not installed
    webdriver = None

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
MSG_401 = "the key was refused (401): ask your platform team for a team key"
MSG_429 = "rate limit of your team's key reached (429)"
OPTION = f"{MODEL} · {VERSION}"
PAGE = ROOT / "roles" / "services" / "router" / "files" / "chat"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
WAIT = 20  # seconds; generous, CI shares two cores


def test_the_page_source_has_no_html_sinks_and_no_foreign_urls():
    """No browser needed: what the page's code must never contain."""
    js = (PAGE / "chat.js").read_text()
    code = re.sub(r"/\*.*?\*/|//[^\n]*", "", js, flags=re.S)  # comments out (they name the sinks)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(",
                 "setTimeout('", 'setTimeout("', "localStorage.setItem(SESSION_KEY"):
        assert sink not in code, sink
    assert "sessionStorage.setItem(SESSION_KEY" in code
    html = (PAGE / "index.html").read_text()
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in html
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="chat.js" defer>']
    assert " style=" not in html and "<style" not in html
    for name in ("index.html", "chat.js", "chat.css"):
        text = (PAGE / name).read_text()
        text = re.sub(r"<!--.*?-->", "", text, flags=re.S) if name.endswith("html") else re.sub(
            r"/\*.*?\*/", "", text, flags=re.S)
        assert not re.search(r"(https?:|wss?:)?//[\w.-]+", text), name  # URLs are relative


@pytest.fixture(scope="module")
def fake():
    with FakeFleet() as server:
        yield server


@pytest.fixture(scope="module")
def driver():
    if webdriver is None:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.skip(f"{path} not found: apt-get install chromium chromium-driver (scripts/setup does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--disable-extensions", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--metrics-recording-only", "--no-default-browser-check",
                # Whatever the page or the browser would look up, nothing but 127.0.0.1 resolves.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    try:
        browser = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    except WebDriverException as exc:
        pytest.skip(f"chromium does not start here: {exc.msg}")
    yield browser
    browser.quit()


def wait(drv, what, timeout: float = WAIT, message: str = ""):
    return WebDriverWait(drv, timeout, poll_frequency=0.05).until(lambda d: what(d), message)


def text(drv, css: str) -> str:
    return drv.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : null", css)


def shown_text(drv, css: str) -> str | None:
    """An element's text as shown (innerText), read in one script: a panel that re-renders between
    finding an element and reading it (a Selenium element's .text) cannot make it stale."""
    return drv.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : null", css)


def last_reply_state(drv) -> str | None:
    return drv.execute_script(
        "const r = [...document.querySelectorAll('#messages .msg-assistant')].pop(); return r ? r.dataset.state : null")


@pytest.fixture
def page(fake, driver):
    """The page opened with empty storage, the fake reset; `open(key)` enters a key."""
    fake.answer, fake.reasoning, fake.delay, fake.first_delay = "Hello from the fleet.", "", 0.0, 0.0
    fake.max_model_len, fake.status, fake.refresh_seconds = 32768, None, 5
    fake.chat_requests.clear()
    fake.disconnects.clear()

    class Page:
        def open(self, key: str | None = TEAM_KEY, clear: bool = True):
            driver.get(fake.url)
            if clear:
                driver.execute_script("localStorage.clear(); sessionStorage.clear();")
                driver.get(fake.url)
            wait(driver, lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))
            if key is not None:
                driver.find_element(By.ID, "key").send_keys(key)
                driver.find_element(By.ID, "key-save").click()
                if key == fake.key:
                    wait(driver, lambda d: self.options() == [OPTION], message="the picker never listed the model")
            return self

        def options(self) -> list[str]:
            return driver.execute_script("return [...document.querySelectorAll('#model option')].map(o => o.text)")

        def ask(self, prompt: str, typed: bool = False):
            box = driver.find_element(By.ID, "prompt")
            if typed:
                box.send_keys(prompt)
            else:
                driver.execute_script("arguments[0].value = arguments[1]", box, prompt)
            driver.find_element(By.ID, "send").click()

        def finished(self, state: str = "done"):
            wait(driver, lambda d: last_reply_state(d) == state, message=f"no reply reached {state}")

        def reply(self) -> str:
            return driver.execute_script(
                "return [...document.querySelectorAll('#messages .msg-assistant .msg-body')].pop().textContent")

        def stat(self, name: str) -> str:
            return driver.execute_script(
                "const r = [...document.querySelectorAll('#messages .msg-assistant')].pop();"
                "const s = r && r.querySelector(`[data-stat=${arguments[0]}]`); return s ? s.textContent : null", name)

    return Page()


def test_page_lists_the_model_with_its_version(page, driver, fake):
    page.open()
    assert page.options() == [OPTION]
    info = driver.find_element(By.ID, "model-info").text
    assert MODEL in info and VERSION in info and "context 32768 tokens" in info
    presets = driver.find_elements(By.CSS_SELECTOR, "#presets .preset")
    assert [b.text for b in presets] == ["写一封辞职信", "生成Python函数注释"]
    presets[1].click()
    assert driver.find_element(By.ID, "prompt").get_attribute("value") == "生成Python函数注释"
    assert f"/ui/models/{MODEL}/v1/models" in fake.paths


#: The most text a stream's open Markdown marks show before they close ("```python\n" and "**").
MARKS = len("```python\n") + len("**")


def test_a_prompt_streams_its_answer_with_stats(page, driver, fake):
    fake.answer = ("Here is **the plan**, step by step, with `code` and a list:\n\n"
                   + "".join(f"- item number {n} of the list\n" for n in range(8))
                   + "\n```python\ndef add(a, b):\n    return a + b\n```\nDone.")
    fake.reasoning = "Let me think about it first."
    # The processing phase lasts until the first token: long enough to be seen by a poll of a
    # browser on a loaded machine (1.2 s was missed once beside six labs, load average 10).
    fake.first_delay, fake.delay = 3.0, 0.03
    page.open()
    page.ask("plan something", typed=True)
    wait(driver, lambda d: "processing prompt" in (text(d, "#live") or ""), message="no processing phase")
    lengths, live = [], set()
    deadline = time.monotonic() + WAIT
    while last_reply_state(driver) != "done" and time.monotonic() < deadline:
        lengths.append(len(page.reply()))
        live.add(text(driver, "#live"))
        time.sleep(0.1)
    assert last_reply_state(driver) == "done"
    final = len(page.reply())
    grown = [n for n in lengths if n]
    # A Markdown mark shows as text until it closes (`**`, a code fence's "```python"): a sample
    # taken mid-stream may be longer than the rendered answer by those marks, never by more.
    assert sum(b > a for a, b in pairwise(grown)) >= 3 and grown[0] < final and max(grown) <= final + MARKS, \
        f"the answer did not grow while streaming: {lengths}, then {final}"
    assert any(re.fullmatch(r"\d+ tokens · (\d+\.\d|—) tok/s · \d+\.\d s", t or "") for t in live), live

    reply = page.reply()
    assert "the plan" in reply and "def add(a, b):" in reply and "**" not in reply
    assert text(driver, "#messages .msg-assistant strong") == "the plan"
    assert text(driver, "#messages .code-lang") == "python"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#messages .msg-assistant ul li")) == 8
    assert text(driver, "#messages .msg-assistant .reasoning-body") == fake.reasoning
    assert driver.find_element(By.CSS_SELECTOR, "#messages .msg-assistant .reasoning summary").text == "Reasoning"

    body = fake.chat_requests[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 512 and body["model"] == MODEL
    assert body["messages"] == [{"role": "user", "content": "plan something"}]
    completion = len(DELTA.findall(fake.answer)) + len(DELTA.findall(fake.reasoning))
    prompt = math.ceil(len("plan something") / 3) + 4
    assert page.stat("tokens") == f"{completion} tokens"
    ttft = int(re.fullmatch(r"TTFT (\d+) ms", page.stat("ttft")).group(1))
    assert 1100 <= ttft < 10000
    assert float(re.fullmatch(r"(\d+\.\d) tok/s", page.stat("tps")).group(1)) > 0
    cost = float(re.fullmatch(r"≈ (\d+\.\d+) CNY", page.stat("cost")).group(1))
    assert cost == pytest.approx(prompt / 1000 * 0.002 + completion / 1000 * 0.006, rel=0.01)
    assert page.stat("node") == "node nvidia-01"


def test_stop_closes_the_connection_and_keeps_the_partial_answer(page, driver, fake):
    words = [f"word{n}" for n in range(400)]
    fake.answer, fake.delay = " ".join(words), 0.05
    finished = fake.finished
    page.open()
    page.ask("talk for a long time")
    wait(driver, lambda d: len(page.reply()) > 40, message="no answer streamed")
    driver.find_element(By.ID, "stop").click()
    page.finished("stopped")
    wait(driver, lambda d: fake.disconnects, timeout=10, message="the server never saw the connection close")
    assert fake.finished == finished, "the stream was written to its end"
    assert fake.disconnects[0] < len(words) - 50
    partial = page.reply()
    assert partial and fake.answer.startswith(partial.strip()) and len(partial.strip()) < len(fake.answer)
    assert page.stat("tokens") and text(driver, "#messages .msg-assistant .stat-stopped") == "stopped"
    assert driver.find_element(By.ID, "stop").get_attribute("disabled") is not None
    assert driver.find_element(By.ID, "send").is_enabled()


def test_reload_keeps_the_history(page, driver, fake):
    fake.answer = "I will remember this."
    page.open()
    page.ask("remember me")
    page.finished()
    driver.refresh()
    wait(driver, lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))
    messages = driver.find_element(By.ID, "messages").text
    assert "remember me" in messages and "I will remember this." in messages
    assert page.stat("node") == "node nvidia-01"
    assert [li.text.replace("×", "").strip() for li in driver.find_elements(By.CSS_SELECTOR, "#history li")] \
        == ["remember me"]
    driver.find_element(By.ID, "new-chat").click()
    assert "remember me" not in driver.find_element(By.ID, "messages").text
    driver.find_element(By.CSS_SELECTOR, "#history .history-open").click()
    assert "I will remember this." in driver.find_element(By.ID, "messages").text


def test_a_wrong_key_shows_the_401_text(page, driver, fake):
    page.open(key="sk-not-a-team-key")
    wait(driver, lambda d: MSG_401 in (text(d, "#error") or ""), message="no 401 message")
    assert page.options() == [f"{OPTION} ({MSG_401})"]  # still offered, under the configured name
    page.ask("hello?")
    page.finished("error")
    assert text(driver, "#messages .msg-assistant .stat-error") == MSG_401
    assert fake.chat_requests, "the page did not send the request"


def test_rate_limit_and_other_errors_are_shown_as_text(page, driver, fake):
    page.open()
    fake.status = 429
    page.ask("one more")
    page.finished("error")
    assert text(driver, "#error") == MSG_429
    fake.status, fake.error_message = 400, "This model's maximum context length is 600 tokens. <b>sic</b>"
    driver.find_element(By.CSS_SELECTOR, "#messages .regenerate").click()
    wait(driver, lambda d: "400" in (text(d, "#error") or ""))
    assert text(driver, "#error") == "400 Bad Request: " + fake.error_message
    assert not driver.find_elements(By.CSS_SELECTOR, "#error b, #messages b")


XSS = ('<script>window.__pwned=1</script>\n\n<img src=x onerror="window.__pwned=2">\n\n'
       "[x](javascript:window.__pwned=3) and [y](data:text/html,<script>alert(1)</script>)")


def test_markup_from_the_model_is_shown_as_text(page, driver, fake):
    fake.answer = XSS
    page.open()
    page.ask("say something nasty")
    page.finished()
    for round_ in ("streamed", "restored from history"):
        assert driver.execute_script("return typeof window.__pwned") == "undefined", round_
        shown = page.reply()
        assert "<script>window.__pwned=1</script>" in shown, round_
        assert '<img src=x onerror="window.__pwned=2">' in shown, round_
        assert "[x](javascript:window.__pwned=3)" in shown, round_
        assert not driver.find_elements(By.CSS_SELECTOR, "#messages script, #messages img, #messages iframe, "
                                                         "#messages a, #messages [onerror]"), round_
        driver.find_elements(By.CSS_SELECTOR, "#messages .msg-body")[-1].click()
        assert driver.execute_script("return typeof window.__pwned") == "undefined", round_
        driver.refresh()
        wait(driver, lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))


def test_the_page_calls_no_other_origin(page, driver, fake):
    fake.refresh_seconds = 1
    fake.answer = "Links stay links: [docs](https://docs.example.invalid/guide) ![img](https://img.example.invalid/x.png)"
    page.open()
    page.ask("any links?")
    page.finished()
    link = driver.find_element(By.CSS_SELECTOR, "#messages a.md-link")
    assert link.get_attribute("href") == "https://docs.example.invalid/guide"
    assert link.get_attribute("rel") == "noopener noreferrer"
    wait(driver, lambda d: "73%" in (text(d, "#fleet") or ""), message="the fleet panel never filled")
    requested = set()
    for entry in driver.get_log("performance"):  # every test's requests so far in this module
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.add(message["params"]["request"]["url"])
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    requested.update(resources)
    assert any(u.endswith("/v1/chat/completions") for u in requested), requested
    assert any(u.endswith("/node/metrics") for u in requested), requested
    elsewhere = sorted(u for u in requested if not u.startswith(fake.origin + "/") and not u.startswith("data:"))
    assert not elsewhere, f"the page called other origins: {elsewhere}"
    refused = [e["message"] for e in driver.get_log("browser") if "Refused to" in e["message"]]
    assert not refused, f"the page tried what its CSP refuses: {refused}"
    csp = driver.find_element(By.CSS_SELECTOR, 'meta[http-equiv="Content-Security-Policy"]').get_attribute("content")
    assert csp == CSP


def test_the_key_is_kept_in_session_storage_only(page, driver, fake):
    page.open()
    page.ask("where is my key?")
    page.finished()
    assert driver.execute_script("return sessionStorage.getItem('vllm-fleet.chat.key')") == TEAM_KEY
    local = driver.execute_script("return Object.entries(localStorage)")
    assert local and not [k for k, v in local if TEAM_KEY in k or TEAM_KEY in v]
    assert TEAM_KEY not in driver.current_url
    assert driver.find_element(By.ID, "key").get_attribute("value") == ""
    assert TEAM_KEY not in driver.execute_script("return document.documentElement.outerHTML")
    assert text(driver, "#key-status") == "key set for this tab only"


def test_long_conversations_are_trimmed_to_the_context(page, driver, fake):
    fake.max_model_len = 600  # 512 for the reply leaves 88 tokens (estimated) for the prompt
    fake.answer = "a" * 120
    page.open()
    wait(driver, lambda d: "context 600 tokens" in d.find_element(By.ID, "model-info").text)
    driver.execute_script("document.getElementById('system').value = arguments[0]", "Answer briefly.")
    for n in range(3):
        page.ask(f"question {n} " + "q" * 108)
        page.finished()
        if n == 0:
            assert not driver.find_element(By.ID, "context-notice").is_displayed()
    sent = [[m["role"] for m in body["messages"]] for body in fake.chat_requests]
    assert sent == [["system", "user"], ["system", "user"], ["system", "user"]]
    assert fake.chat_requests[-1]["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert fake.chat_requests[-1]["messages"][1]["content"].startswith("question 2 ")
    notice = driver.find_element(By.ID, "context-notice")
    assert notice.is_displayed() and notice.text == "4 earlier messages left out to fit the context"
    assert page.stat("tokens") and text(driver, "#messages .msg-assistant:last-child .stat-notice") == notice.text
    assert len(driver.find_elements(By.CSS_SELECTOR, "#messages .msg")) == 6  # the page still shows them all


def test_the_fleet_panel_shows_replicas_and_accelerators(page, driver, fake):
    fake.refresh_seconds = 1
    page.open()
    wait(driver, lambda d: "73%" in (text(d, "#fleet") or ""), message="the fleet panel never filled")
    up = shown_text(driver, '#fleet .fleet-replica[data-node="nvidia-01"]')
    for part in ("up", "running 1", "waiting 2", "KV 13%", "#0 util 73% · mem 20.0 / 80.0 GiB",
                 "#1 util — · mem 1.0 / 80.0 GiB"):
        assert part in up, (part, up)
    down = shown_text(driver, '#fleet .fleet-replica[data-node="nvidia-02"]')
    assert "down (503" in down
    fake.generated += 500  # between two refreshes: a rate appears
    wait(driver, lambda d: re.search(r"[1-9][\d.]* tok/s", text(d, '#fleet [data-stat="gen"]') or ""),
         message="no generation tokens/s")
    driver.find_element(By.CSS_SELECTOR, "#fleet summary").click()
    assert not driver.find_element(By.ID, "fleet-body").is_displayed()
