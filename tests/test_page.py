"""The browser page, in a real browser: Playwright drives Debian's Chromium against a real uvicorn server.

Playwright's own browser download cannot be reached here, so the system's /usr/bin/chromium is launched by path;
where it (or Playwright) is missing the tests skip and say why.
"""

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi, uvicorn) is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="the serve extra (fastapi, uvicorn) is not installed")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install pytest-playwright)"
)

from transduce.serving import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(app) -> Iterator[str]:
    """uvicorn serving `app` on 127.0.0.1 from a thread of this process (the model is loaded once); yields the URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def chromium_browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def translator(trained_run):
    from transduce.decoding.translator import Translator

    return Translator.from_run(trained_run[0])


def open_page(browser, url: str):
    """A fresh page on `url`, once its script has read /v1/info; records every URL the page asks for."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.requested = []
    page.on("request", lambda request: page.requested.append(request.url))
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready=true]", timeout=10_000)
    return page


def test_translate_and_draw_the_attention_heatmap(chromium_browser, translator, trained_run, tmp_path):
    import httpx

    sentences = (trained_run[1] / "test.en").read_text().splitlines()[:2]
    # What the page must show, computed before the server starts: the server runs the same model on its own thread,
    # and a second caller racing it would overwrite the attention weights it records for the heatmap.
    expected = [translator.translate([s])[0] for s in sentences]
    with serving(create_app(translator)) as url:
        page = open_page(chromium_browser, url)
        page.get_by_label("Text to translate").fill(sentences[0])
        page.get_by_role("button", name="Translate").click()
        page.wait_for_selector("#translations li .translation", timeout=10_000)
        assert page.locator("#translations .translation").first.text_content() == expected[0]

        maps = httpx.post(url + "/v1/attention", json={"text": sentences[0]}).json()
        rows, cols = len(maps["target_pieces"]), len(maps["source_pieces"])
        cells = page.locator("#heatmap rect.cell")
        cells.nth(rows * cols - 1).wait_for(timeout=10_000)
        assert cells.count() == rows * cols
        assert page.locator("#heatmap text.source-piece").all_text_contents() == maps["source_pieces"]
        assert page.locator("#heatmap text.target-piece").all_text_contents() == maps["target_pieces"]

        page.get_by_label("Layer").select_option(label="1")
        page.get_by_label("Head").select_option(label=str(maps["heads"]))
        assert f"layer 1, head {maps['heads']}" in page.locator("#heatmap").get_attribute("aria-label")
        assert cells.count() == rows * cols
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)

        # the keyboard alone: Enter in the text box runs it
        page.get_by_label("Text to translate").fill(sentences[1])
        page.get_by_label("Text to translate").press("Enter")
        page.wait_for_function(
            "text => document.querySelector('#translations .translation').textContent === text",
            arg=expected[1],
            timeout=10_000,
        )
        assert all(u.startswith(url) for u in page.requested), page.requested  # works offline
        page.close()
    assert (tmp_path / "page.png").stat().st_size > 10_000


def test_a_document_is_translated_whole_with_its_markup(chromium_browser, translator):
    """Issue 73: the page's Input choice sends the text box as one HTML document; the answer keeps its tags."""
    html = "<p>red <b>dog</b> near the house</p>"
    with serving(create_app(translator)) as url:
        page = open_page(chromium_browser, url)
        page.get_by_label("Input").select_option("html")
        page.get_by_label("Text to translate").fill(html)
        page.get_by_role("button", name="Translate").click()
        page.wait_for_selector("#document-out:not([hidden])", timeout=10_000)
        shown = page.locator("#document-out").text_content()
        assert shown.startswith("<p>") and shown.count("<b>") == 1 and shown.endswith("</p>")
        assert page.locator("#translations li").count() == 0
        page.close()


def test_errors_are_shown_on_the_page(chromium_browser, translator):
    with serving(create_app(translator)) as url:
        page = open_page(chromium_browser, url)
        page.get_by_label("Text to translate").fill("x" * 2001)  # over the default max_chars
        page.get_by_role("button", name="Translate").click()
        page.wait_for_selector("#status.error", timeout=10_000)
        assert "at most 2000" in page.locator("#status").text_content()
        page.close()


def test_a_classifier_page_shows_label_and_probabilities(chromium_browser, trained_run):
    from conftest import untrained_classifier

    classifier = untrained_classifier(trained_run[0] / "tokenizer.model", ["neg", "pos"])
    label = classifier.predict(["a b c"])[0]  # before the server starts (see the translation page's test)
    with serving(create_app(classifier)) as url:
        page = open_page(chromium_browser, url)
        page.get_by_label("Text to classify").fill("a b c")
        page.get_by_role("button", name="Classify").click()
        page.wait_for_selector("table.probabilities", timeout=10_000)
        assert page.locator("table.probabilities caption").text_content() == f"a b c → {label}"
        assert sorted(page.locator("table.probabilities th").all_text_contents()) == ["neg", "pos"]
        page.close()


def test_a_parsing_page_draws_the_tree(chromium_browser, tmp_path_factory, tmp_path):
    from test_serve import untrained_parse_run

    from transduce.decoding.parser import Parser

    parser = Parser.from_run(untrained_parse_run(tmp_path_factory.mktemp("parse-page")), device="cpu")
    sentence = "the old dog ( a cat ) sees every tree ."
    # Before the server starts: a parse on this thread while the server's thread records the tree's attention would
    # overwrite the recorded weights (the page then fails to draw a heatmap of the wrong shape).
    expected = parser.parse([sentence])[0]
    with serving(create_app(parser)) as url:
        page = open_page(chromium_browser, url)
        assert page.locator("#input-help").text_content().startswith("One sentence per line, words separated")
        page.get_by_label("Sentence to parse").fill(sentence)
        page.get_by_role("button", name="Parse").click()
        page.wait_for_selector("#parse-trees svg text.tree-word", timeout=10_000)
        svg = page.get_by_role("img", name=f"Parse tree of: {sentence}")
        assert svg.locator("text.tree-word").all_text_contents() == sentence.split()  # one leaf per word, in order
        assert svg.locator("text.tree-label.root").all_text_contents() == ["ROOT"]
        labels = svg.locator("text.tree-label").count()
        assert svg.locator("line.tree-edge").count() == labels - 1 + len(sentence.split())  # a tree: one edge per child
        assert page.locator("#parse-trees code.bracketed").text_content() == expected
        page.locator("#heatmap rect.cell").first.wait_for(timeout=10_000)  # the tree's attention, drawn as well
        page.screenshot(path=str(tmp_path / "parse.png"), full_page=True)

        # the keyboard alone: Enter in the text box parses
        page.get_by_label("Sentence to parse").fill("a cat finds the river .")
        page.get_by_label("Sentence to parse").press("Enter")
        page.get_by_role("img", name="Parse tree of: a cat finds the river .").wait_for(timeout=10_000)
        words = page.locator("#parse-trees svg text.tree-word").all_text_contents()
        assert words == ["a", "cat", "finds", "the", "river", "."]
        assert all(u.startswith(url) for u in page.requested), page.requested  # works offline
        page.close()
    assert (tmp_path / "parse.png").stat().st_size > 10_000
