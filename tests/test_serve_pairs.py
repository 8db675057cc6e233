"""Several language pairs in one server (serving/pairs.py): `transduce serve RUN1 RUN2` (or a folder of runs) routes
LibreTranslate's and /v1's requests by source and target, lists every pair, runs every model on one model thread,
and refuses in one line what cannot be combined. Two tiny runs: the shared `trained_run` (en -> xx) and a copy of
it with earlier weights and its config saying de -> xx, so the two pairs answer differently."""

import asyncio
import json
import re
import shutil
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi, uvicorn) is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")

from fastapi.testclient import TestClient
from test_libretranslate import best  # what a translator gives for a paragraph, as the server splits it

from transduce.cli import main
from transduce.config import ConfigError
from transduce.serving import Limits, create_app, create_pairs_app
from transduce.serving.pairs import check_runs, load_models, runs_of
from transduce.terminology import Glossary

LIMITS = Limits(max_sentences=8, max_chars=300, max_body_bytes=20_000, max_beam=6, timeout_s=30.0)
TEXTS = ["red dog near the house", "the cat sees over. A big tree runs."]
GERMAN = "Der Hund läuft heute Morgen schnell über die große Wiese hinter unserem Haus."
ENGLISH = "The dog runs quickly across the big meadow behind our house this morning."


def copy_run(run, out, *, weights=None, **config):
    """A copy of `run` (without its checkpoints) at `out`; `weights`: a checkpoint of it as the copy's best weights;
    `config`: keys of its config.json replaced ("data.src": "de" sets data.src)."""
    shutil.copytree(run, out, ignore=shutil.ignore_patterns("checkpoints"))
    if weights is not None:
        shutil.copy(run / "checkpoints" / weights / "model.safetensors", out / "best.safetensors")
    settings = json.loads((out / "config.json").read_text())
    for key, value in config.items():
        section, _, name = key.rpartition(".")
        (settings[section] if section else settings)[name] = value
    (out / "config.json").write_text(json.dumps(settings))
    return out


@pytest.fixture(scope="module")
def runs(trained_run, tmp_path_factory):
    """A folder holding two runs: en-xx (the trained run's best weights) and de-xx (its step-100 weights)."""
    folder = tmp_path_factory.mktemp("pairs") / "runs"
    folder.mkdir()
    english = copy_run(trained_run[0], folder / "en-xx")
    german = copy_run(trained_run[0], folder / "de-xx", weights="step-00000100", **{"data.src": "de"})
    return {"en": english, "de": german}


@pytest.fixture(scope="module")
def translators(runs):
    from transduce.decoding.translator import Translator

    return {source: Translator.from_run(run) for source, run in runs.items()}


@pytest.fixture(scope="module")
def models(runs):
    return load_models([runs["en"], runs["de"]], device="cpu")


@pytest.fixture
def client(models):
    with TestClient(create_pairs_app(models, limits=LIMITS)) as test_client:
        yield test_client


def error_of(response, status):
    assert response.status_code == status, response.text
    return response.json()["error"]


def one_line(capsys):
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------------------------------------------- listing
def test_languages_and_info_list_every_pair(client, translators):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["xx"]},
        {"code": "de", "name": "German", "targets": ["xx"]},
        {"code": "xx", "name": "xx", "targets": []},
    ]
    info = client.get("/v1/info").json()
    assert info["task"] == "translation" and info["engine"] == "torch" and "languages" not in info
    assert [p["languages"] for p in info["pairs"]] == [
        {"source": "en", "target": "xx"},
        {"source": "de", "target": "xx"},
    ]
    assert [p["run"] for p in info["pairs"]] == ["en-xx", "de-xx"]
    parameters = sum(p.numel() for p in translators["en"].model.parameters())
    assert all(p["parameters"] == parameters and p["attention"] is True for p in info["pairs"])
    assert all(p["decode_defaults"]["beam"] == translators["en"].decode.beam for p in info["pairs"])
    assert info["limits"]["max_sentences"] == 8 and info["batching"]["enabled"] is True
    assert client.get("/health").json() == {"status": "ok", "task": "translation"}
    assert client.get("/frontend/settings").json()["language"]["source"]["code"] == "en"  # the first pair
    assert {"/v1/translate", "/v1/attention", "/translate"} <= set(client.get("/openapi.json").json()["paths"])


# ---------------------------------------------------------------------------------------------------- routing
def test_each_pair_translates_as_its_own_translator(client, translators):
    expected = {source: best(translator, TEXTS) for source, translator in translators.items()}
    assert expected["en"] != expected["de"]  # the two pairs are told apart by their answers
    for source in ("en", "de"):
        libre = client.post("/translate", json={"q": TEXTS, "source": source, "target": "xx"})
        assert libre.json() == {"translatedText": expected[source]}
        v1 = client.post("/v1/translate", json={"text": TEXTS, "source": source, "target": "xx"})
        assert [t["text"] for t in v1.json()["translations"]] == expected[source]
    either_case = client.post("/v1/translate", json={"text": TEXTS, "source": "DE", "target": "XX"})
    assert [t["text"] for t in either_case.json()["translations"]] == expected["de"]
    source_only = client.post("/v1/translate", json={"text": TEXTS, "source": "de"})  # one pair from de: enough
    assert [t["text"] for t in source_only.json()["translations"]] == expected["de"]


def test_attention_takes_the_pair(client, translators):
    answer = client.post("/v1/attention", json={"text": TEXTS[0], "languages": {"source": "de", "target": "xx"}})
    assert answer.status_code == 200, answer.text
    maps = translators["de"].attention(TEXTS[0], translators["de"].translate(TEXTS[0]))
    assert answer.json()["target_pieces"] == maps.target_pieces
    error = error_of(client.post("/v1/attention", json={"text": TEXTS[0]}), 422)
    assert error["code"] == "pair_required"


@pytest.mark.parametrize(
    "pair, code, says",
    [
        ({}, "pair_required", "several language pairs (en → xx, de → xx): give source and target"),
        ({"target": "xx"}, "pair_required", "give source and target"),
        ({"source": "fr", "target": "xx"}, "pair_not_served", "no pair fr → xx is served; this server translates"),
        ({"source": "xx"}, "pair_not_served", "no pair from xx is served"),
    ],
)
def test_a_missing_or_unserved_pair_is_422_naming_the_served_pairs(client, pair, code, says):
    error = error_of(client.post("/v1/translate", json={"text": TEXTS, **pair}), 422)
    assert error["code"] == code and says in error["message"]
    assert error["pairs"] == [["en", "xx"], ["de", "xx"]]


def test_libretranslate_refuses_an_unserved_pair_in_its_shape(client):
    for body, message in [
        ({"source": "fr", "target": "xx"}, "fr is not supported"),
        ({"source": "xx", "target": "de"}, "German (de) is not available as a target language from xx (xx)"),
        ({"source": "en"}, "Invalid request: missing target parameter"),
    ]:
        answer = client.post("/translate", json={"q": TEXTS[0], **body})
        assert answer.status_code == 400 and answer.json() == {"error": message}


def test_source_auto_picks_among_the_served_sources(client, translators):
    for text, language in ((GERMAN, "de"), (ENGLISH, "en")):
        answer = client.post("/translate", json={"q": text, "source": "auto", "target": "xx"}).json()
        assert answer["detectedLanguage"]["language"] == language
        assert answer["translatedText"] == best(translators[language], [text])[0]
    detected = client.post("/detect", json={"q": GERMAN}).json()
    assert [d["language"] for d in detected] == ["de", "en"]


def test_a_one_pair_server_takes_its_pair_or_none(translators):
    metadata = {"languages": {"source": "en", "target": "xx"}}
    with TestClient(create_app(translators["en"], limits=LIMITS, metadata=metadata)) as test_client:
        expected = best(translators["en"], TEXTS)
        for pair in ({}, {"source": "en", "target": "xx"}, {"source": "EN"}):
            got = test_client.post("/v1/translate", json={"text": TEXTS, **pair}).json()["translations"]
            assert [t["text"] for t in got] == expected
        error = error_of(test_client.post("/v1/translate", json={"text": TEXTS, "source": "de"}), 422)
        assert error["code"] == "pair_not_served" and "this server translates en → xx" in error["message"]
        assert "pairs" not in test_client.get("/v1/info").json()  # a one-run server's info is as it always was
    with TestClient(create_app(translators["en"], limits=LIMITS)) as test_client:  # a model that names no languages
        error = error_of(test_client.post("/v1/translate", json={"text": TEXTS, "target": "xx"}), 422)
        assert "names no languages" in error["message"]


def test_a_folder_of_exports_is_served_by_the_engine(runs, tmp_path):
    """CTranslate2 exports keep their pair in their manifest: a folder of them is a server of both pairs."""
    pytest.importorskip("ctranslate2", reason="the export extra (ctranslate2) is not installed")
    from transduce.export.ctranslate2 import export_ctranslate2

    for source, run in runs.items():
        export_ctranslate2(run, tmp_path / "exports" / f"{source}-xx-ct2")
    models = load_models(runs_of([tmp_path / "exports"]), engine="ctranslate2", device="cpu")
    with TestClient(create_pairs_app(models, limits=LIMITS, engine="ctranslate2")) as test_client:
        info = test_client.get("/v1/info").json()
        assert info["engine"] == "ctranslate2" and [p["run"] for p in info["pairs"]] == ["de-xx-ct2", "en-xx-ct2"]
        for predictor, metadata in models:
            source = metadata["languages"]["source"]
            answer = test_client.post("/translate", json={"q": TEXTS, "source": source, "target": "xx"})
            assert answer.json() == {"translatedText": best(predictor, TEXTS)}
        assert test_client.post("/v1/attention", json={"text": TEXTS[0]}).status_code == 404  # the engine has none


# ---------------------------------------------------------------------------------------------------- one model thread
class Recorder:
    """A stand-in translation predictor that records when each of its calls ran (start, end)."""

    def __init__(self, calls, delay=0.15):
        self.calls, self.delay = calls, delay

    def translate_nbest(self, texts, **options):
        start = time.monotonic()
        time.sleep(self.delay)
        self.calls.append((start, time.monotonic(), threading.current_thread().name))
        return [[type("T", (), {"text": t.upper(), "score": -1.0})()] for t in texts]


def test_the_models_share_one_model_thread_and_never_decode_at_once():
    calls = []
    pairs = [("en", "xx"), ("de", "xx"), ("fr", "xx")]
    models = [(Recorder(calls), {"languages": {"source": s, "target": t}}) for s, t in pairs]
    app = create_pairs_app(models, limits=LIMITS, max_wait_ms=1.0)
    executors = {service.batcher.executor for service in app.state.services}
    assert len(executors) == 1 and next(iter(executors))._max_workers == 1

    async def post_all():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            bodies = [{"text": [f"text {i}"], "source": pairs[i % 3][0], "target": "xx"} for i in range(6)]
            responses = await asyncio.gather(*(http.post("/v1/translate", json=b) for b in bodies))
        for service in app.state.services:
            await service.batcher.close()
        return responses

    responses = asyncio.run(post_all())
    assert [r.json()["translations"][0]["text"] for r in responses] == [f"TEXT {i}" for i in range(6)]
    spans = sorted(calls)
    assert len(spans) >= 3 and len({name for _, _, name in spans}) == 1
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in zip(spans, spans[1:]))  # one at a time


# ---------------------------------------------------------------------------------------------------- refusals
def test_a_folder_of_runs_is_its_runs(runs, tmp_path):
    folder = runs["en"].parent
    assert runs_of([folder]) == [runs["de"], runs["en"]]  # in name order
    assert runs_of([runs["en"]]) == [runs["en"]]  # a run is itself
    assert runs_of([tmp_path / "missing"]) == [tmp_path / "missing"]  # refused later, as it always was
    (tmp_path / "notes").mkdir()
    assert runs_of([tmp_path]) == [tmp_path]  # no run in its subfolders: not a folder of runs


@pytest.fixture(scope="module")
def odd_runs(runs, tmp_path_factory):
    """Runs that cannot be served beside others: a classifier's and a parser's config, a run naming no source
    language, and a second run of en -> xx."""
    root = tmp_path_factory.mktemp("odd")
    return {
        "classifier": copy_run(runs["en"], root / "sentiment", task="classification"),
        "parser": copy_run(runs["en"], root / "gum", task="parsing"),
        "unknown": copy_run(runs["en"], root / "nameless", **{"data.src": ""}),
        "same pair": copy_run(runs["en"], root / "en-xx-again"),
    }


@pytest.mark.parametrize(
    "case, says",
    [
        ("classifier", "sentiment: a classification run cannot be served beside other runs"),
        ("parser", "gum: a parsing run cannot be served beside other runs"),
        ("unknown", "nameless: its languages are unknown"),
        ("same pair", "en-xx and {run} both translate en → xx: serve one of them"),
        ("glossary", "--glossary serves one run, not 2"),
    ],
)
def test_serve_refuses_what_cannot_be_combined_in_one_line(runs, odd_runs, tmp_path, capsys, case, says):
    """Before any model is loaded or the port is bound (port 99999 would be refused next: nothing is served)."""
    extra = []
    if case == "glossary":
        (tmp_path / "terms.tsv").write_text("dog\tCAT\n")
        other, extra = runs["de"], ["--glossary", str(tmp_path / "terms.tsv")]
    else:
        other = odd_runs[case]
    assert main(["serve", str(runs["en"]), str(other), *extra, "--port", "99999"]) == 1
    assert says.format(run=other) in one_line(capsys)
    with pytest.raises(ConfigError, match=re.escape(says.format(run=other))):
        check_runs([runs["en"], other], "torch", glossary=case == "glossary")


def test_the_same_run_twice_is_refused_naming_it(runs, capsys):
    assert main(["serve", str(runs["de"]), str(runs["de"]), "--port", "99999"]) == 1
    assert f"{runs['de']} and {runs['de']} both translate de → xx" in one_line(capsys)


def test_models_handed_over_in_python_are_checked_alike(models, trained_run):
    from conftest import untrained_classifier

    classifier = untrained_classifier(trained_run[0] / "tokenizer.model", ["neg", "pos"])
    with pytest.raises(ConfigError, match="sentiment: a classification run cannot be served beside other runs"):
        create_pairs_app([models[0], (classifier, {"run": "sentiment"})])
    with pytest.raises(ConfigError, match="en-xx and en-xx both translate en → xx"):
        create_pairs_app([models[0], models[0]])
    with pytest.raises(ConfigError, match="model 2: its languages are unknown"):
        create_pairs_app([models[0], (models[1][0], {})])
    with pytest.raises(ConfigError, match="--glossary serves one run, not 2"):
        create_pairs_app(models, glossary=Glossary([("dog", "CAT")]))


# ---------------------------------------------------------------------------------------------------- the command
def test_the_serve_command_serves_a_folder_of_runs(runs, translators, monkeypatch):
    """`transduce serve FOLDER --port 0` as typed, up to the point where uvicorn would take over: the app it builds
    serves both pairs."""
    import transduce.serving.app as app_module

    built = []
    monkeypatch.setattr(app_module, "run_server", lambda app, **options: built.append((app, options)))
    assert main(["serve", str(runs["en"].parent), "--port", "0", "--device", "cpu"]) == 0
    app, options = built[0]
    assert options["port"] == 0 and options["host"] == "127.0.0.1"
    with TestClient(app) as test_client:
        assert [p["run"] for p in test_client.get("/v1/info").json()["pairs"]] == ["de-xx", "en-xx"]
        answer = test_client.post("/translate", json={"q": TEXTS, "source": "de", "target": "xx"})
        assert answer.json() == {"translatedText": best(translators["de"], TEXTS)}


def test_the_page_translates_the_pair_chosen(models, translators):
    """The page's Languages choice (shown only with several pairs) sends the pair it names."""
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from test_page import CHROMIUM, CHROMIUM_ARGS, open_page, serving

    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    expected = {source: translators[source].translate([TEXTS[0]])[0] for source in ("en", "de")}
    with serving(create_pairs_app(models)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = open_page(browser, url)
        for label, source in (("en → xx", "en"), ("de → xx", "de")):
            page.get_by_label("Languages").select_option(label=label)
            page.get_by_label("Text to translate").fill(TEXTS[0])
            page.get_by_role("button", name="Translate").click()
            page.wait_for_function(
                "text => document.querySelector('#translations .translation')?.textContent === text",
                arg=expected[source],
                timeout=10_000,
            )
            assert f"{source} → xx" in page.locator("#model-info").text_content()
        page.locator("#attention-result:not([hidden])").wait_for(timeout=10_000)  # the attention of the pair chosen
        browser.close()


def test_v1_source_auto_picks_among_the_served_sources_and_says_which(client, translators):
    """/v1/translate takes LibreTranslate's "auto" too: the identifier among the sources served into the target."""
    for text, language in ((GERMAN, "de"), (ENGLISH, "en")):
        answer = client.post("/v1/translate", json={"text": [text], "source": "auto", "target": "xx"}).json()
        assert answer["source"] == language
        assert answer["translations"][0]["text"] == best(translators[language], [text])[0]
    named = client.post("/v1/translate", json={"text": [ENGLISH], "source": "en", "target": "xx"}).json()
    assert "source" not in named  # said only when it was found
    unserved = client.post("/v1/translate", json={"text": [ENGLISH], "source": "auto", "target": "yy"})
    assert error_of(unserved, 422)["code"] == "pair_not_served"
