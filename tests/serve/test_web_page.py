"""The web page at ``/`` in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium): pick a mode, give the key, ask, watch the answer stream
in, click a citation and read its passage with the supporting sentence marked.

The browser is found on the machine, or installed with ``apt-get`` where the tests run as root on
Debian (as the PostgreSQL tests find their server); the test is skipped with the reason only
where neither works. ``RAG_PACK_SCREENSHOT`` names a file to keep a screenshot of the page in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from llama_index_rag_pack import RagPack  # noqa: E402

pytestmark = pytest.mark.slow

#: Flags for a headless Chromium on a machine without network or display, as root.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)


def _browser_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def find_or_install_chromium() -> tuple[str, str]:
    """Paths of Chromium and its driver: found, or installed from Debian's packages."""
    found = _browser_paths()
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip("no chromium/chromedriver here, and no apt-get as root to install them")
    command = [apt, "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in ([apt, "update"], command):
        done = subprocess.run(attempt, env=env, capture_output=True, text=True, timeout=900)
        if attempt is command and done.returncode != 0:
            pytest.skip(f"could not install chromium: {done.stderr.strip()[-300:]}")
        found = _browser_paths() if attempt is command else None
    if not found:
        pytest.skip("chromium was installed but chromium/chromedriver are not on PATH")
    return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium, chromedriver = find_or_install_chromium()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium never downloads a driver
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    yield driver
    driver.quit()


def test_ask_on_the_page_and_open_a_citation(serve: Any, facts_pack: RagPack, browser: Any) -> None:
    url = serve(facts_pack, keys=("page-key",))
    wait = WebDriverWait(browser, 60)
    browser.get(url + "/")
    key = wait.until(ec.visibility_of_element_located((By.ID, "key")))  # keys are on
    key.send_keys("page-key")
    browser.find_element(By.ID, "question").click()  # leaving the key field loads the modes
    wait.until(lambda d: len(Select(d.find_element(By.ID, "mode")).options) > 1)
    mode = Select(browser.find_element(By.ID, "mode"))
    assert mode.first_selected_option.get_attribute("value") == facts_pack.default_mode
    mode.select_by_value("hybrid_convex")

    browser.find_element(By.ID, "question").send_keys("What is the capital of Andorra?")
    browser.find_element(By.ID, "ask").click()
    turn = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".turn[data-done='true']")))
    answer = turn.find_element(By.CLASS_NAME, "answer")
    assert "Andorra la Vella" in answer.text and "Sources:" not in answer.text
    assert turn.find_elements(By.CSS_SELECTOR, ".sources li.cited")

    turn.find_element(By.CSS_SELECTOR, "button.cite").click()
    passage = wait.until(ec.visibility_of_element_located((By.ID, "passage")))
    assert "Andorra" in passage.find_element(By.ID, "passage-title").text
    marked = passage.find_elements(By.CSS_SELECTOR, "#passage-text mark")
    assert marked and "Andorra la Vella" in " ".join(m.text for m in marked)
    assert "wikipedia.org/wiki/Andorra" in passage.find_element(By.ID, "passage-meta").text
    if os.environ.get("RAG_PACK_SCREENSHOT"):
        browser.save_screenshot(str(Path(os.environ["RAG_PACK_SCREENSHOT"])))

    # a follow-up is answered in the same conversation
    browser.find_element(By.ID, "passage-close").click()
    browser.find_element(By.ID, "question").send_keys("How high is it?")
    browser.find_element(By.ID, "ask").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn[data-done='true']")) == 2)
    second = browser.find_elements(By.CSS_SELECTOR, ".turn .answer")[1]
    assert "1,023" in second.text


def test_a_refused_key_is_shown_on_the_page(serve: Any, facts_pack: RagPack, browser: Any) -> None:
    url = serve(facts_pack, keys=("page-key",))
    wait = WebDriverWait(browser, 60)
    browser.get(url + "/")
    wait.until(ec.visibility_of_element_located((By.ID, "key"))).send_keys("wrong-key")
    browser.find_element(By.ID, "question").click()
    wait.until(lambda d: "Invalid API key" in d.find_element(By.ID, "status").text)
    browser.find_element(By.ID, "question").send_keys("What is the capital of Andorra?")
    browser.find_element(By.ID, "ask").click()
    error = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".answer.error")))
    assert "Invalid API key" in error.text
