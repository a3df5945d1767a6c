"""A real browser against a real server: Debian's chromium driven by Playwright.

The server is uvicorn on 127.0.0.1 (a free port) in a thread of this process.
The browser is the system's /usr/bin/chromium (`apt-get install chromium`), so
nothing is downloaded. Screenshots land in $BROWSER_SCREENSHOTS (default: the
test's tmp dir) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.service.http.test_web import BAD_TP, BAD_TP_LINE  # the same invalid config as the HTML tests

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
LAPTOP = {"width": 1366, "height": 900}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM) or Path(CHROMIUM).exists(), (
        f"{CHROMIUM} not found: apt-get install chromium (make test installs it)"
    )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("BROWSER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(params=[True, False], ids=["js", "no-js"])
def page(request, browser):
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=request.param)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # Console errors, CSP violations included; a page answered with a 4xx on purpose logs one too.
    pg.on("console", lambda msg: errors.append(msg.text)
          if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    pg.on("response", lambda r: errors.append(f"{r.status} {r.url}")
          if r.status >= 400 and r.request.resource_type != "document" else None)
    yield pg
    context.close()
    assert not errors, errors  # no script errors, no CSP violations, no missing style or script


def test_recommend_form_to_result(page, live_server_url, shots, request):
    page.goto(f"{live_server_url}/")
    page.fill("#model", "llama3-70b")
    page.select_option("#gpu_type", "h100")
    page.fill("#gpus", "8")
    page.fill("#nodes", "4")
    page.select_option("#goal", "pretrain")
    page.fill("#seq_length", "8192")
    page.select_option("#engine", "megatron")
    page.click("button[type=submit]")
    page.wait_for_selector("#layout")
    assert "/recommend?" in page.url

    headers = page.locator("table.layout th").all_inner_texts()
    assert headers[:8] == ["TP", "PP", "VP", "CP", "EP", "ETP", "DP", "SP"]
    cells = page.locator("table.layout td").all_inner_texts()
    tp, pp, cp, dp = int(cells[0]), int(cells[1]), int(cells[3]), int(cells[6])
    assert tp * pp * cp * dp == 32

    chart = page.locator("#memory svg.memory")
    assert chart.count() == 1
    assert chart.locator("rect.segment").count() >= 4
    assert "GiB of 80" in chart.locator("title").first.text_content()
    box = chart.bounding_box()
    assert box["width"] > 600 and box["height"] > 40  # drawn, at a readable size

    config = page.locator("#config-yaml").inner_text()
    assert "tp_size" in config and "llama3-70b" in config or "Meta-Llama-3-70B" in config
    assert page.locator("#recipe").inner_text().count("llama3_70b") >= 1
    assert page.locator("#changes table").count() == 1 or "None" in page.inner_text("#changes")
    assert "torchrun" in page.inner_text("#commands")

    download = page.locator("a[download]")
    assert download.get_attribute("href").startswith("/recommend.yaml?")
    if request.node.callspec.id == "js":
        assert page.locator("button.copy-button").first.is_visible()
    else:
        assert not page.locator("button.copy-button").first.is_visible()  # needs JS, so hidden without it
    page.screenshot(path=str(shots / f"recommend-{request.node.callspec.id}.png"), full_page=True)
    assert (shots / f"recommend-{request.node.callspec.id}.png").stat().st_size > 20_000


def test_download_button_gives_the_yaml(page, live_server_url, tmp_path):
    page.goto(f"{live_server_url}/recommend?model=llama3-8b&gpu_type=h100&gpus=8&nodes=1&goal=sft&engine=megatron")
    with page.expect_download() as info:
        page.click("a[download]")
    saved = tmp_path / info.value.suggested_filename
    info.value.save_as(saved)
    assert saved.name == "llama3-8b-sft-8xh100.yaml"
    assert saved.read_text() == page.locator("#config-yaml").inner_text().rstrip("\n") + "\n"


def test_form_error_is_shown_on_the_form(page, live_server_url):
    page.goto(f"{live_server_url}/")
    page.fill("#model", "llama3-8x")
    page.click("button[type=submit]")
    alert = page.locator("[role=alert]")
    assert "llama3-8b" in alert.inner_text()
    assert page.input_value("#model") == "llama3-8x"  # what the user typed stays


def test_validate_page_shows_the_finding_on_its_line(page, live_server_url, shots):
    page.goto(f"{live_server_url}/validate")
    page.fill("#yaml", BAD_TP)
    page.click("button[type=submit]")
    page.wait_for_selector("#findings")
    flagged = page.locator(f"tr#L{BAD_TP_LINE}")
    assert flagged.get_attribute("class") == "flagged"
    assert "tp_size: 3" in flagged.inner_text()
    finding = page.locator(f'tr.finding[data-line="{BAD_TP_LINE}"]').first
    assert "distributed.tp_size" in finding.inner_text()
    assert "error" in finding.inner_text()
    # The finding row follows its line directly in the listing.
    following = page.locator(f"tr#L{BAD_TP_LINE} + tr")
    assert following.get_attribute("data-line") == str(BAD_TP_LINE)
    page.screenshot(path=str(shots / "validate.png"), full_page=True)
    assert (shots / "validate.png").stat().st_size > 10_000


def test_validate_upload(page, live_server_url, tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text(BAD_TP)
    page.goto(f"{live_server_url}/validate")
    page.set_input_files("#file", str(config))
    page.click("button[type=submit]")
    page.wait_for_selector("#findings")
    assert "recipe.yaml" in page.inner_text("#findings")
    assert page.locator(f'tr.finding[data-line="{BAD_TP_LINE}"]').count() >= 1


def test_typed_markup_stays_text(page, live_server_url):
    hostile = "<img src=x onerror=alert(1)>"
    page.goto(f"{live_server_url}/validate")
    page.fill("#yaml", f"model:\n  pretrained_model_name_or_path: '{hostile}'\n")
    page.click("button[type=submit]")
    page.wait_for_selector("#findings")
    assert page.locator("img").count() == 0
    assert hostile in page.inner_text("table.listing")


PHONE = {"width": 390, "height": 844}
RESULT_QUERY = "model=llama3-70b&gpu_type=h100&gpus=8&nodes=4&goal=pretrain&seq_length=8192&engine=megatron"
LONG_LINE = "# " + "a long comment line that a phone cannot show in full " * 4 + "\n"
# What overflows the page, what sticks out of its card, and how wide the header is (the page's own width).
WIDTHS = """() => ({
    page: document.documentElement.scrollWidth,
    window: window.innerWidth,
    header: document.querySelector("header.top").getBoundingClientRect().width,
    cards: [...document.querySelectorAll(".card")].filter(c => c.scrollWidth > c.clientWidth).map(c => c.id),
})"""


def open_pages(page, live_server_url):
    """(name, page) for the form, a result and a validate result, each loaded in turn."""
    page.goto(f"{live_server_url}/")
    yield "form"
    page.goto(f"{live_server_url}/recommend?{RESULT_QUERY}")
    page.wait_for_selector("#layout")
    yield "result"
    page.goto(f"{live_server_url}/validate")
    page.fill("#yaml", LONG_LINE + BAD_TP)
    page.click("button[type=submit]")
    page.wait_for_selector("#findings")
    yield "validate"


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390px", "1366px"])
def test_every_page_fits_the_window(browser, live_server_url, shots, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    try:
        for name in open_pages(page, live_server_url):
            widths = page.evaluate(WIDTHS)
            page.screenshot(path=str(shots / f"fit-{name}-{viewport['width']}.png"), full_page=True)
            assert widths["page"] <= widths["window"], (name, widths)  # no sideways scrolling of the page
            assert widths["header"] == widths["window"], (name, widths)
            assert not widths["cards"], (name, widths)  # wide tables scroll inside their card
            if name == "result":
                # The memory bar's labels scale with the bar: shown only where readable (the legend says the same).
                heights = page.eval_on_selector_all("#memory svg.memory text",
                                                    "texts => texts.map(t => t.getBoundingClientRect().height)")
                shown = [h for h in heights if h > 0]
                assert all(h >= 10 for h in shown), heights
                assert shown if viewport is LAPTOP else not shown, heights
                assert "usable" in page.inner_text("#memory .legend")
    finally:
        context.close()


def test_the_api_docs_render_offline(browser, live_server_url, shots):
    """Swagger UI renders the operations from this server's files: every request off it is refused."""
    context = browser.new_context(viewport=LAPTOP)
    refused: list[str] = []

    def only_this_server(route):
        if route.request.url.startswith(live_server_url):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    context.route("**/*", only_this_server)
    page = context.new_page()
    try:
        page.goto(f"{live_server_url}/docs")
        page.wait_for_selector(".opblock-summary-path", timeout=15_000)
        page.screenshot(path=str(shots / "api-docs.png"), full_page=True)
        paths = [p.replace("\u200b", "") for p in page.locator(".opblock-summary-path").all_inner_texts()]
        assert {"/v1/validate", "/v1/recommend", "/healthz"} <= set(paths), paths
        assert not refused, refused  # nothing it needed came from the internet
    finally:
        context.close()
