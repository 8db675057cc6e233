"""Terminology over HTTP (serving/terminology.py): `constraints`, `prefix` and `glossary` on POST /v1/translate and
`serve --glossary`. The toy model (conftest.trained_run) turns lowercase words into uppercase ones, so phrases such
as "CAT" are spellable; every answer is checked against the Translator called with the same terminology."""

import asyncio

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi, uvicorn) is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")

from fastapi.testclient import TestClient
from test_serve import LIMITS, error_of

from transduce.cli import main
from transduce.config import ConfigError
from transduce.serving import Limits, create_app, load_predictor
from transduce.terminology import Constraints, Glossary

TEXTS = ["the red dog runs", "big blue tree", "a small cat sees the house"]


@pytest.fixture(scope="module")
def translator(trained_run):
    from transduce.decoding.translator import Translator

    return Translator.from_run(trained_run[0])


@pytest.fixture
def client(translator):
    with TestClient(create_app(translator, limits=LIMITS)) as test_client:
        yield test_client


def texts_of(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [t["text"] for t in response.json()["translations"]]


def best(translator, texts, **options) -> list[str]:
    return [h[0].text if h else "" for h in translator.decode_lines(texts, **options).hypotheses]


# ---------------------------------------------------------------------------------------------------- per text
def test_constraints_put_a_phrase_in_and_keep_a_phrase_out(client, translator):
    plain = best(translator, TEXTS)
    assert "CAT" not in plain[0] and "TREE" in plain[1]  # what the constraints change
    constraints = [{"include": ["CAT"]}, {"exclude": ["TREE"]}, None]
    got = texts_of(client.post("/v1/translate", json={"text": TEXTS, "split": "lines", "constraints": constraints}))
    assert "CAT" in got[0] and "TREE" not in got[1] and got[2] == plain[2]
    expected = [Constraints(include=("CAT",)), Constraints(exclude=("TREE",)), None]
    assert got == best(translator, TEXTS, constraints=expected)


def test_a_prefix_starts_the_translation(client, translator):
    body = {"text": TEXTS[:2], "prefix": ["HOUSE", None]}
    got = texts_of(client.post("/v1/translate", json=body))
    assert got[0].startswith("HOUSE") and not best(translator, TEXTS[:1])[0].startswith("HOUSE")
    assert got == best(translator, TEXTS[:2], prefixes=["HOUSE", None], split="sentences")
    assert got[1] == texts_of(client.post("/v1/translate", json={"text": TEXTS[1:2]}))[0]


def test_a_request_glossary_changes_only_the_texts_holding_its_terms(client):
    plain = client.post("/v1/translate", json={"text": TEXTS}).json()["translations"]
    glossed = client.post("/v1/translate", json={"text": TEXTS, "glossary": [["Dog", "CAT"]]}).json()["translations"]
    assert "CAT" in glossed[0]["text"] and "CAT" not in plain[0]["text"]
    for before, after in zip(plain[1:], glossed[1:]):  # no term in these texts: the unconstrained search
        assert after["text"] == before["text"] and after["score"] == pytest.approx(before["score"], abs=1e-5)


def test_the_server_glossary_applies_to_every_request_and_a_requests_entry_wins(translator):
    server = Glossary([("dog", "CAT")], "terms.tsv")
    with TestClient(create_app(translator, limits=LIMITS, glossary=server)) as test_client:
        assert test_client.get("/v1/info").json()["glossary"] == {"entries": 1}
        got = texts_of(test_client.post("/v1/translate", json={"text": TEXTS}))
        assert got == best(translator, TEXTS, glossary=server, split="sentences") and "CAT" in got[0]
        overridden = texts_of(test_client.post("/v1/translate", json={"text": TEXTS, "glossary": [["DOG", "HOUSE"]]}))
        assert "HOUSE" in overridden[0] and overridden[1:] == got[1:]
        assert overridden == best(translator, TEXTS, glossary=Glossary([("dog", "HOUSE")]), split="sentences")
        html = texts_of(test_client.post("/v1/translate", json={"text": ["<p>the red dog</p>"], "format": "html"}))
        assert "CAT" in html[0] and html[0].startswith("<p>")
        target = test_client.post("/v1/attention", json={"text": TEXTS[0]}).json()["target_pieces"]
        assert "".join(target[1:]).replace("\u2581", " ").strip() == got[0]  # the route's own answer
    assert "glossary" not in TestClient(create_app(translator)).get("/v1/info").json()


def test_a_document_takes_a_glossary_but_no_constraints_or_prefix(client):
    html = "<p>the red <b>dog</b></p>"
    got = texts_of(client.post("/v1/translate", json={"text": [html], "format": "html", "glossary": [["dog", "CAT"]]}))
    assert "CAT" in got[0] and got[0].startswith("<p>") and got[0].count("<b>") == 1
    for field, value in (("constraints", [{"include": ["CAT"]}]), ("prefix", ["CAT"])):
        body = {"text": [html], "format": "html", field: value}
        assert "no constraints or prefix" in error_of(client.post("/v1/translate", json=body), 422)["message"]


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "extra, code, says",
    [
        ({"constraints": [None]}, "invalid_request", "constraints has 1 entries but text has 2"),
        ({"prefix": ["A", None, None]}, "invalid_request", "prefix has 3 entries but text has 2"),
        ({"constraints": [{"include": ["A"] * 20, "exclude": ["B"] * 13}, None]}, "limit_exceeded", "max_phrases"),
        ({"constraints": [None, {"include": ["A" * 201]}]}, "limit_exceeded", "max_phrase_chars"),
        ({"prefix": ["A" * 1001, None]}, "limit_exceeded", "max_prefix_chars"),
        ({"glossary": [["dog", "C" * 201]]}, "limit_exceeded", "max_term_chars"),
        ({"glossary": [[f"w{i}", "X"] for i in range(4)]}, "limit_exceeded", "max_glossary_entries"),
        ({"glossary": [["dog", " "]]}, "invalid_request", "glossary: entry 1: the target term is empty"),
        ({"glossary": [["dog", "A"], ["DOG", "B"]]}, "invalid_request", "entry 2: the source term 'DOG' is already"),
        ({"glossary": [["dog"]]}, "invalid_request", "glossary.0:"),
        ({"constraints": [{"include": [" "]}, None]}, "invalid_request", "constraints.0.include.0: the phrase"),
        ({"constraints": [{"include": ["A"], "exclude": ["A "]}, None]}, "invalid_request", "both a phrase to include"),
        ({"constraints": [{"include": ["A"], "other": ["B"]}, None]}, "invalid_request", "unknown field"),
        ({"glossary": [["dog", "CAT"]], "sampling_topk": 0}, "invalid_request", "they take no sampling"),
    ],
)
def test_bad_or_oversized_terminology_is_422_naming_it(translator, extra, code, says):
    limits = Limits(max_sentences=8, max_chars=200, max_beam=6, max_glossary_entries=3)
    with TestClient(create_app(translator, limits=limits)) as test_client:
        error = error_of(test_client.post("/v1/translate", json={"text": TEXTS[:2], **extra}), 422)
    assert error["code"] == code and (says in error["message"] or error.get("limit") == says), error


def test_a_lone_surrogate_in_a_phrase_is_422(client):
    body = b'{"text": ["a"], "constraints": [{"exclude": ["x\\ud800"]}]}'
    error = error_of(client.post("/v1/translate", content=body, headers={"content-type": "application/json"}), 422)
    assert error["code"] == "invalid_text" and "constraints.0.exclude.0" in error["message"]


def test_what_the_decoder_refuses_is_422_naming_the_line(client):
    unsatisfiable = {"text": ["a", "red dog"], "split": "lines", "constraints": [None, {"include": ["CAT " * 12]}]}
    error = error_of(client.post("/v1/translate", json=unsatisfiable), 422)
    assert error["message"].startswith("line 2: the constraints and prefix need")
    paragraph = {"text": ["The dog runs. The cat sees."], "constraints": [{"include": ["CAT"]}]}
    assert 'split "lines"' in error_of(client.post("/v1/translate", json=paragraph), 422)["message"]
    unspellable = {"text": ["red dog"], "prefix": ["é"]}
    assert "cannot spell" in error_of(client.post("/v1/translate", json=unspellable), 422)["message"]


# ---------------------------------------------------------------------------------------------------- batching
async def _posted(app, bodies):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        responses = await asyncio.gather(*(http.post("/v1/translate", json=b) for b in bodies))
    await app.state.service.batcher.close()
    return responses


def test_terminology_requests_are_decoded_apart_and_a_refused_one_spares_the_others(translator):
    """Plain requests still share model calls (under a server glossary too); a request with terminology of its own
    is decoded alone, and one the decoder refuses fails only itself."""
    plain = [{"text": [t]} for t in TEXTS]
    bad = {"text": ["red dog"], "split": "lines", "constraints": [{"include": ["CAT " * 12]}]}
    prefixed = {"text": TEXTS[:1], "prefix": ["HOUSE"]}
    server = Glossary([("tree", "DOG")])
    app = create_app(translator, limits=LIMITS, max_wait_ms=100.0, glossary=server)
    responses = asyncio.run(_posted(app, [plain[0], bad, plain[1], prefixed, plain[2]]))
    assert [r.status_code for r in responses] == [200, 422, 200, 200, 200]
    assert "line 1" in responses[1].json()["error"]["message"]
    got = {i: r.json()["translations"][0]["text"] for i, r in enumerate(responses) if i != 1}
    assert [got[0], got[2], got[4]] == best(translator, TEXTS, glossary=server, split="sentences")
    assert got[3] == best(translator, TEXTS[:1], glossary=server, prefixes=["HOUSE"], split="sentences")[0]
    batcher = app.state.service.batcher
    assert batcher.calls < 4  # the three plain requests shared a call, the prefixed one had its own


# ---------------------------------------------------------------------------------------------------- engines, tasks
def test_the_ctranslate2_engine_takes_a_prefix_and_refuses_constraints_and_glossaries(trained_run):
    pytest.importorskip("ctranslate2", reason="the export extra (ctranslate2) is not installed")
    predictor, metadata = load_predictor(trained_run[0], engine="ctranslate2", device="cpu")
    app = create_app(predictor, limits=LIMITS, engine="ctranslate2", metadata=metadata)
    with TestClient(app) as test_client:
        got = texts_of(test_client.post("/v1/translate", json={"text": TEXTS[:2], "prefix": ["HOUSE", None]}))
        assert got[0].startswith("HOUSE")
        for extra in ({"constraints": [{"include": ["CAT"]}]}, {"glossary": [["dog", "CAT"]]}):
            error = error_of(test_client.post("/v1/translate", json={"text": TEXTS[:1], **extra}), 422)
            assert "CTranslate2 has no lexical constraints" in error["message"]
    with pytest.raises(ConfigError, match="--glossary needs --engine torch"):
        create_app(predictor, engine="ctranslate2", glossary=Glossary([("dog", "CAT")]))


def test_a_server_glossary_serves_translation_runs_only(trained_run):
    from conftest import untrained_classifier

    classifier = untrained_classifier(trained_run[0] / "tokenizer.model", ["neg", "pos"])
    with pytest.raises(ConfigError, match="--glossary applies to a translation run, not a classification run"):
        create_app(classifier, glossary=Glossary([("dog", "CAT")]))


@pytest.mark.parametrize(
    "content, args, says",
    [
        ("dog\tCAT\nbird\n", [], "terms.tsv:2: 1 field, expected 2"),
        ("dog\tCAT\n", ["--engine", "ctranslate2"], "--glossary needs --engine torch"),
    ],
)
def test_serve_refuses_a_bad_glossary_in_one_line_before_loading(tmp_path, capsys, content, args, says):
    """The run given does not exist: the glossary is refused before the model is loaded or the port bound."""
    terms = tmp_path / "terms.tsv"
    terms.write_text(content)
    assert main(["serve", str(tmp_path / "no-run"), "--glossary", str(terms), *args]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and says in err
