"""The sample's `snakemake --report report.html` in a real headless browser (Chromium from Debian's packages
`chromium` and `chromium-driver`, driven by selenium): it loads without script errors, every chart is there
and drawn, and the plan page's table holds plan.json's numbers.

``SNAKEPACK_REPORT_SCREENSHOT=docs/report-plan.png`` also saves the plan page as the README's screenshot.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.report.test_charts import CHARTS
from tests.utils import Workflow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")
pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="Chromium is not installed (apt-get install chromium chromium-driver, as .ci/setup does)",
    ),
]
SCREENSHOT = os.environ.get("SNAKEPACK_REPORT_SCREENSHOT")


@pytest.fixture(scope="module")
def browser(report_html: Path) -> Iterator:
    """Headless Chromium with the report loaded (its React app started)."""
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1500,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        driver.get(report_html.as_uri())
        WebDriverWait(driver, 60).until(lambda d: d.execute_script("return typeof app === 'object'"))
        yield driver
    finally:
        driver.quit()


def image_width(driver, uri: str) -> int:
    """The natural width of an image once the browser decoded it (0: it did not load)."""
    script = (
        "const done = arguments[arguments.length - 1]; const img = new Image();"
        "img.onload = () => done(img.naturalWidth); img.onerror = () => done(0); img.src = arguments[0];"
    )
    return driver.execute_async_script(script, uri)


def show(driver, path: str) -> None:
    """Show a result as the report's eye button does (an HTML result opens in an iframe)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.switch_to.default_content()
    driver.execute_script(
        "app.showCategory(arguments[0]); app.setView({content: 'html', "
        "contentPath: results[arguments[1]].data_uri, resultPath: arguments[1]})",
        path.split("/")[-2].capitalize(),
        path,
    )
    frame = WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
    driver.switch_to.frame(frame)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def test_the_report_loads_without_script_errors(browser) -> None:
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert browser.execute_script("return Object.keys(categories).sort()") == ["Data", "Plan", "Training"]


def test_every_chart_is_present_and_drawn(browser) -> None:
    browser.switch_to.default_content()
    results = browser.execute_script(
        "return Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v.data_uri]))"
    )
    for section, charts in CHARTS.items():
        for chart in charts:
            png = f"results/report/{section}/{chart}.png"
            assert results.get(png, "").startswith("data:image/png"), png
            assert image_width(browser, results[png]) > 100, png
            assert len(results.get(f"results/report/{section}/{chart}.csv", "")) > 40, chart
        show(browser, f"results/report/{section}/index.html")
        widths = browser.execute_script("return [...document.images].map(i => i.naturalWidth)")
        assert len(widths) == len(charts) and min(widths) > 100, (section, widths)
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_the_plan_page_shows_the_plans_numbers(browser, trained: Workflow) -> None:
    plan = orjson.loads((trained.root / "results" / "plan.json").read_bytes())
    show(browser, "results/report/plan/index.html")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#table-schedule tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    header, body = rows[0], rows[1:]
    assert header == [
        "pack",
        "phase",
        "tokens",
        "train_iters",
        "iteration_offset",
        "trained_tokens",
        "wall_hours",
    ]
    shown = [dict(zip(header, row, strict=True)) for row in body]
    assert [(r["pack"], r["phase"]) for r in shown] == [(p["name"], p["phase"]) for p in plan["packs"]]
    for row, pack in zip(shown, plan["packs"], strict=True):
        for key in ("tokens", "train_iters", "iteration_offset", "trained_tokens"):
            assert int(row[key]) == pack[key], (pack["name"], key)
        assert float(row["wall_hours"]) == pytest.approx(pack["wall_hours"], rel=1e-5)
    if SCREENSHOT:
        browser.switch_to.default_content()
        browser.save_screenshot(SCREENSHOT)
