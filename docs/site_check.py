"""The built site in a real browser (`make site-check`): serve `site/` over HTTP, drive headless
Chromium (Debian's `chromium` and `chromium-driver`) through the home page, a lesson, its executed
notebook (outputs visible), the language switch and the search, save a screenshot of each, and fail
on a missing element or on any error in the browser's console (a script error, a failed request).

    python docs/site_check.py site --screenshots build/site-check
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHAPTER = "chapters/11-kv-memory"  # a lesson with figures, a notebook with text and image outputs
WAIT_S = 20.0
# what nothing outside the machine needs: no network, no GPU, no profile, no background updates
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1000"]


class SiteCheckFailed(Exception):
    pass


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """The built site on a free local port, in a background thread."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # the browser's console reports failed requests
        pass


def browser(profile: Path) -> WebDriver:
    for path, package in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if not Path(path).is_file():
            raise SiteCheckFailed(f"{path} not found: install Debian's {package} "
                                  "(apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(DRIVER))


class Walk:
    """One browser session over the site: each step opens or clicks, waits for what must appear, takes a
    screenshot and reads the console."""

    def __init__(self, driver: WebDriver, base: str, shots: Path) -> None:
        self.driver, self.base, self.shots = driver, base, shots

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def wait_for(self, what: str, found: Callable[[WebDriver], object]) -> object:
        try:
            return WebDriverWait(self.driver, WAIT_S).until(lambda d: found(d))
        except TimeoutException:
            raise SiteCheckFailed(f"{self.driver.current_url}: {what} did not appear within {WAIT_S:.0f} s") from None

    def css(self, selector: str) -> list:
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def done(self, name: str) -> None:
        """Screenshot the page, then fail on any console error since the last step."""
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        errors = [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]
        if errors:
            raise SiteCheckFailed(f"{self.driver.current_url}: console error: " + " | ".join(errors))


def home(walk: Walk) -> None:
    walk.open("")
    walk.wait_for("the home page's title", lambda d: "minisgl" in d.title)
    walk.wait_for("the link to chapter 00's lesson", lambda d: walk.css('a[href*="chapters/00-getting-started/"]'))
    walk.done("home")


def lesson(walk: Walk) -> None:
    walk.open(f"{CHAPTER}/")
    walk.wait_for("the lesson's heading", lambda d: "Chapter 11" in " ".join(h.text for h in walk.css("h1")))
    images = walk.wait_for("the lesson's figures", lambda d: walk.css("article img"))
    walk.wait_for("every figure loaded", lambda d: all(d.execute_script(
        "return arguments[0].complete && arguments[0].naturalWidth > 0", img) for img in images))
    walk.done("lesson")


def notebook(walk: Walk) -> None:
    walk.open(f"{CHAPTER}/{CHAPTER.rsplit('/', 1)[1]}/")
    outputs = walk.wait_for("the notebook's executed outputs",
                            lambda d: [o for o in walk.css(".jp-OutputArea-output") if o.text.strip()])
    walk.wait_for("an output figure", lambda d: walk.css(".jp-OutputArea-output img"))
    walk.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", outputs[0])
    walk.done("notebook")


def language_switch(walk: Walk) -> None:
    walk.open(f"{CHAPTER}/")
    chinese = walk.wait_for("the language menu's 中文 entry", lambda d: walk.css('a.md-select__link[hreflang="zh"]'))
    walk.driver.execute_script("arguments[0].click()", chinese[0])  # the menu opens on hover; the link is its item
    walk.wait_for("the Chinese lesson", lambda d: f"/zh/{CHAPTER}/" in d.current_url
                  and "第 11 章" in " ".join(h.text for h in walk.css("h1")))
    walk.done("language-switch")


def search(walk: Walk) -> None:
    walk.open("")
    boxes = walk.wait_for("the search box", lambda d: [b for b in walk.css("input.md-search__input") if b.is_displayed()])
    box = boxes[0]
    box.click()
    box.send_keys("radix")
    walk.wait_for("search results for 'radix' leading to chapter 11", lambda d: [
        a for a in walk.css(".md-search-result__item a") if CHAPTER in (a.get_attribute("href") or "")])
    walk.done("search")
    box.send_keys(Keys.ESCAPE)


STEPS = [home, lesson, notebook, language_switch, search]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --site-dir)")
    parser.add_argument("--screenshots", type=Path, default=Path("build/site-check"))
    args = parser.parse_args()
    if not (args.site / "index.html").is_file():
        print(f"site-check: {args.site}/index.html not found: build the site first (make docs)", file=sys.stderr)
        return 1
    args.screenshots.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    server, base = serve(args.site)
    try:
        with tempfile.TemporaryDirectory(prefix="minisgl-chromium-") as profile:
            driver = browser(Path(profile))
            try:
                walk = Walk(driver, base, args.screenshots)
                for step in STEPS:
                    began = time.perf_counter()
                    try:
                        step(walk)
                    except WebDriverException as error:  # the browser refused an action: one line, not a trace
                        raise SiteCheckFailed(f"{step.__name__}: {error.msg}") from None
                    print(f"site-check: {step.__name__.replace('_', ' ')} ok ({time.perf_counter() - began:.1f} s)")
            finally:
                driver.quit()
    except SiteCheckFailed as failure:
        print(f"site-check failed: {failure}", file=sys.stderr)
        return 1
    finally:
        server.shutdown()
    print(f"site-check: {len(STEPS)} steps passed in {time.perf_counter() - start:.1f} s; "
          f"screenshots in {args.screenshots}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
