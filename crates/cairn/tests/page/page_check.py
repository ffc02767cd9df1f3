#!/usr/bin/python3
"""Opens cairn's analytics page in headless Chromium (Selenium + chromedriver) and checks it.

    page_check.py URL SCREENSHOT.png [FULL_PAGE.png]

Run by crates/cairn/tests/analytics.rs while a workload runs against the server. Prints one JSON
line with what it saw and exits non-zero when a check fails:
- the page loads at 1280x800 and its script runs (window.cairnPage exists);
- a latency heatmap has cells (the workload's operations, drawn);
- the panels update: two updates arrive, the second within 2 s of the first;
- the browser logged no console errors;
and saves a screenshot to SCREENSHOT.png (the 1280x800 view), and with FULL_PAGE.png one of the
whole page at 1280 wide (how docs/analytics.png is made).
"""

import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service


def main():
    url, screenshot = sys.argv[1], sys.argv[2]
    full_page = sys.argv[3] if len(sys.argv) > 3 else None
    options = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,800"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    failures = []
    seen = {}
    try:
        driver.set_page_load_timeout(30)
        driver.get(url)
        page = lambda: driver.execute_script("return window.cairnPage || null")
        deadline = time.time() + 20
        while time.time() < deadline:
            state = page()
            if state and state["updates"] >= 1 and state["heatCells"] > 0:
                break
            time.sleep(0.2)
        state = page()
        if state is None:
            failures.append("window.cairnPage is missing: the page's script did not run")
            state = {"updates": 0, "heatCells": 0, "lastUpdateMs": 0, "errors": 0}
        seen["first"] = state
        if state["heatCells"] <= 0:
            failures.append("no heatmap cells were drawn within 20 s")
        # Updates: the next two must each come within 2 s.
        for round_index in range(2):
            before = page()
            started = time.time()
            while time.time() - started < 2.0:
                now = page()
                if now["updates"] > before["updates"]:
                    break
                time.sleep(0.05)
            now = page()
            waited = time.time() - started
            seen[f"update_{round_index}_s"] = round(waited, 3)
            if now["updates"] <= before["updates"]:
                failures.append(f"no update within 2 s (update {round_index + 1})")
        final = page()
        seen["final"] = final
        if final["errors"]:
            failures.append(f"the page failed to fetch {final['errors']} time(s)")
        width = driver.execute_script("return document.documentElement.clientWidth")
        scroll_width = driver.execute_script("return document.documentElement.scrollWidth")
        seen["width"], seen["scroll_width"] = width, scroll_width
        if scroll_width > width + 1:
            failures.append(f"the page is wider than 1280 px ({scroll_width} > {width})")
        driver.save_screenshot(screenshot)
        if full_page:
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1280, height + 140)
            time.sleep(1.5)
            driver.save_screenshot(full_page)
        console = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        seen["console_errors"] = [entry["message"] for entry in console]
        if console:
            failures.append(f"console errors: {seen['console_errors']}")
    finally:
        driver.quit()
    seen["failures"] = failures
    print(json.dumps(seen))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
