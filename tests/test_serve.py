"""The HTTP server: every route, every limit and error code, dynamic batching, graceful shutdown."""

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi, uvicorn) is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")

from conftest import ROOT
from fastapi.testclient import TestClient

from transduce.cli import main
from transduce.config import ConfigError
from transduce.serving import DynamicBatcher, Limits, create_app, load_predictor

LIMITS = Limits(max_sentences=8, max_chars=200, max_body_bytes=20_000, max_beam=6, timeout_s=20.0)


@pytest.fixture(scope="module")
def translator(trained_run):
    from transduce.decoding.translator import Translator

    return Translator.from_run(trained_run[0])


@pytest.fixture(scope="module")
def sentences(trained_run):
    return (trained_run[1] / "test.en").read_text().splitlines()[:12]


@pytest.fixture
def client(translator):
    with TestClient(
        create_app(translator, limits=LIMITS, metadata={"languages": {"source": "en", "target": "xx"}})
    ) as test_client:
        yield test_client


def error_of(response, status):
    assert response.status_code == status, response.text
    return response.json()["error"]


# ---------------------------------------------------------------------------------------------------- routes
def test_health_info_docs(client, translator):
    assert client.get("/health").json() == {"status": "ok", "task": "translation"}
    info = client.get("/v1/info").json()
    assert info["task"] == "translation" and info["engine"] == "torch"
    assert info["languages"] == {"source": "en", "target": "xx"}
    assert info["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert info["limits"]["max_sentences"] == 8 and info["batching"]["enabled"] is True
    assert info["decode_defaults"]["beam"] == translator.decode.beam and info["attention"] is True
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/translate", "/v1/attention", "/v1/info", "/health"} <= set(paths)
    assert "/v1/classify" not in paths and client.post("/v1/classify", json={"text": ["a"]}).status_code == 404


def test_translate_keeps_input_order_and_matches_the_translator(client, translator, sentences):
    text = sentences[:5] + [""] + sentences[5:7]
    response = client.post("/v1/translate", json={"text": text})
    assert response.status_code == 200, response.text
    got = response.json()["translations"]
    expected = translator.translate_nbest(text)
    assert [t["text"] for t in got] == [h[0].text if h else "" for h in expected]
    assert got[5] == {"text": "", "score": 0.0}
    assert all("nbest" not in t for t in got)
    assert got[0]["score"] == pytest.approx(expected[0][0].score, abs=1e-4)


def test_nbest_lists_hypotheses_best_first(client, sentences):
    got = client.post("/v1/translate", json={"text": sentences[:3], "beam": 4, "nbest": 3, "alpha": 1.0}).json()
    for translation in got["translations"]:
        scores = [h["score"] for h in translation["nbest"]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert translation["nbest"][0]["text"] == translation["text"]


def test_attention_has_layers_heads_target_source(client, translator, sentences):
    target = client.post("/v1/translate", json={"text": sentences[:1]}).json()["translations"][0]["text"]
    explicit = client.post("/v1/attention", json={"text": sentences[0], "target": target}).json()
    implicit = client.post("/v1/attention", json={"text": sentences[0]}).json()
    assert explicit == implicit  # the default target is the model's own translation
    n_layers = len(translator.model.decoder.layers)
    assert explicit["layers"] == n_layers and explicit["heads"] == translator.model.config.n_heads
    assert explicit["source_pieces"][-1] == "</s>" and explicit["target_pieces"][0] == "<s>"
    rows, cols = len(explicit["target_pieces"]), len(explicit["source_pieces"])
    for layer in explicit["cross"]:
        for head in layer:
            assert len(head) == rows and all(len(row) == cols for row in head)
            assert all(sum(row) == pytest.approx(1.0, abs=2e-3) for row in head)


def test_page_and_its_files_are_served_without_the_filesystem(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<label for="source"' in page.text and "default-src 'self'" in page.headers["content-security-policy"]
    script, style = client.get("/static/page.js"), client.get("/static/page.css")
    assert script.headers["content-type"].startswith("text/javascript") and style.status_code == 200
    for text in (page.text, script.text, style.text):  # nothing from a CDN: the only URLs are SVG's namespace
        assert re.findall(r"https?://[^\s\"'<>]+", text.replace("http://www.w3.org/2000/svg", "")) == []
    assert client.get("/static/index.html").status_code == 404
    assert client.get("/static/..%2fapp.py").status_code == 404


# ---------------------------------------------------------------------------------------------------- errors
def test_invalid_json_is_400(client):
    response = client.post("/v1/translate", content=b'{"text": ["a",', headers={"content-type": "application/json"})
    assert error_of(response, 400)["code"] == "invalid_json"


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"text": ["a"], "beem": 3}, "beem: unknown field"),
        ({"text": "a plain string"}, "text:"),
        ({"text": []}, "text:"),
        ({"text": ["a"], "beam": 0}, "beam:"),
        ({"text": ["a"], "nbest": 0}, "nbest:"),
        ({"text": ["a"], "beam": 2, "nbest": 3}, "nbest (3) must not exceed beam (2)"),
        ({"text": [1, 2]}, "text.0:"),
        ({"text": ["a"], "beam": "4"}, "beam: Input should be a valid integer"),  # strict: no string -> int
        ({"text": ["a"], "beam": True}, "beam: Input should be a valid integer"),  # nor true -> 1
        ({"text": ["a"], "alpha": "0.5"}, "alpha: Input should be a valid number"),
    ],
)
def test_bad_requests_are_422_naming_the_field(client, body, fragment):
    assert fragment in error_of(client.post("/v1/translate", json=body), 422)["message"]


def test_a_json_integer_is_a_valid_alpha(client):
    assert client.post("/v1/translate", json={"text": ["a"], "alpha": 1, "beam": 2}).status_code == 200


def test_head_and_options_are_answered(client):
    """HEAD of a GET route: its status and headers without a body; OPTIONS: 204 listing the route's methods (no
    CORS headers); HEAD of a POST route 405 with Allow, an unknown path 404 (issue 65 item 4: both were 405)."""
    head, got = client.head("/health"), client.get("/health")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"]
    assert client.head("/").headers["content-type"].startswith("text/html")
    options = client.options("/v1/translate")
    assert options.status_code == 204 and options.headers["allow"] == "OPTIONS, POST"
    assert "access-control-allow-origin" not in options.headers
    assert client.options("/v1/info").headers["allow"] == "GET, HEAD, OPTIONS"
    refused = client.head("/v1/translate")
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    assert client.options("/nowhere").status_code == 404


@pytest.mark.parametrize(
    "body, limit",
    [
        ({"text": ["a"] * 9}, "max_sentences"),
        ({"text": ["a", "b" * 201]}, "max_chars"),
        ({"text": ["a"], "beam": 7}, "max_beam"),
    ],
)
def test_request_limits_are_422_naming_the_limit(client, body, limit):
    error = error_of(client.post("/v1/translate", json=body), 422)
    assert error["limit"] == limit and error["max"] == getattr(LIMITS, limit)


def test_body_size_limit_is_413_declared_or_streamed(client):
    big = {"text": ["a" * 100] * 250}
    error = error_of(client.post("/v1/translate", json=big), 413)
    assert error["limit"] == "max_body_bytes" and error["max"] == 20_000
    chunks = (b'{"text": ["' + b"a" * 5000 + b'"]}' for _ in range(5))  # no Content-Length: chunked
    assert error_of(client.post("/v1/translate", content=chunks), 413)["limit"] == "max_body_bytes"


class SlowTranslator:
    """A stand-in predictor that takes `delay` seconds per call, or fails when asked to translate "boom"."""

    def __init__(self, delay=0.0):
        self.delay = delay

    def translate_nbest(self, texts, **options):
        if "boom" in texts:
            raise RuntimeError("model failure")
        time.sleep(self.delay)
        return [[type("T", (), {"text": t.upper(), "score": -1.0})()] for t in texts]


def test_slow_requests_time_out_with_504():
    app = create_app(SlowTranslator(delay=1.0), limits=Limits(timeout_s=0.2))
    with TestClient(app) as test_client:
        error = error_of(test_client.post("/v1/translate", json={"text": ["x"]}), 504)
    assert error["limit"] == "timeout_s"


def test_a_model_failure_is_a_json_500():
    with TestClient(create_app(SlowTranslator()), raise_server_exceptions=False) as test_client:
        assert error_of(test_client.post("/v1/translate", json={"text": ["boom"]}), 500)["code"] == "internal_error"
        assert test_client.post("/v1/translate", json={"text": ["ok"]}).json()["translations"][0]["text"] == "OK"


# ---------------------------------------------------------------------------------------------------- batching
async def _concurrent(app, bodies, route="/v1/translate", key="translations"):
    """POST all bodies at once through the ASGI app; returns the JSON answers in order."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        responses = await asyncio.gather(*(http.post(route, json=b) for b in bodies))
    await app.state.service.batcher.close()
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    return [r.json()[key] for r in responses]


def test_concurrent_requests_are_batched_and_equal_one_at_a_time(translator, sentences):
    bodies = [{"text": [s]} for s in sentences] + [
        {"text": sentences[:3], "beam": 3},
        {"text": sentences[3:5], "beam": 3, "nbest": 2},
    ]
    app = create_app(translator, limits=LIMITS, max_wait_ms=50.0)
    answers = asyncio.run(_concurrent(app, bodies))
    batcher = app.state.service.batcher
    assert batcher.requests == len(bodies) and batcher.calls < len(bodies)  # requests shared model calls
    assert batcher.calls >= 3  # ... but only with equal options: beam 2 (default), beam 3, beam 3 + nbest 2
    for body, answer in zip(bodies, answers):
        for sentence, got in zip(body["text"], answer):
            alone = translator.translate_nbest([sentence], beam=body.get("beam"), nbest=body.get("nbest", 1))[0]
            assert got["text"] == alone[0].text
            assert got["score"] == pytest.approx(alone[0].score, abs=1e-4)
            if "nbest" in body:
                assert [h["text"] for h in got["nbest"]] == [h.text for h in alone]


def test_without_batching_each_request_is_its_own_call(translator, sentences):
    app = create_app(translator, limits=LIMITS, batching=False)
    answers = asyncio.run(_concurrent(app, [{"text": [s]} for s in sentences[:6]]))
    assert app.state.service.batcher.calls == 6
    assert [a[0]["text"] for a in answers] == translator.translate(sentences[:6])


def test_sampling_requests_repeat_by_seed_even_among_others_and_bad_ones_are_422(translator, sentences):
    """The request's sampling settings reach the decoding (the answer is the Translator's own sample); a sampling
    request is decoded apart from others (each sentence's draws are seeded by its index in the call), so the same
    request with the same seed gets the same answer whatever else is in flight."""
    body = {"text": sentences[:4], "sampling_topk": 0, "temperature": 1.5, "seed": 7}
    bodies = [body, {"text": sentences[4:8]}, {"text": sentences[:2], "sampling_topk": 0, "seed": 7}, body]
    app = create_app(translator, limits=LIMITS, max_wait_ms=50.0)
    answers = asyncio.run(_concurrent(app, bodies))
    expected = translator.translate(sentences[:4], sampling_topk=0, temperature=1.5, seed=7)
    assert [a["text"] for a in answers[0]] == [a["text"] for a in answers[3]] == expected
    assert [a["text"] for a in answers[2]] == translator.translate(sentences[:2], sampling_topk=0, seed=7)
    assert [a["text"] for a in answers[1]] == translator.translate(sentences[4:8])
    assert expected != translator.translate(sentences[:4])  # it did sample (temperature 1.5 on a tiny model)
    with TestClient(create_app(translator, limits=LIMITS)) as client:
        for bad, says in (
            ({"sampling_topk": 0, "beam": 4}, "draws one translation per sentence"),
            ({"sampling_topk": 1, "sampling_topp": 0.5}, "needs a sampling top-k of 0"),
            ({"tag": "<2fr>"}, "is not a tag of the vocabulary"),
            ({"sampling_topp": 0.0}, "sampling_topp"),
            ({"temperature": -1}, "temperature"),
        ):
            error = error_of(client.post("/v1/translate", json={"text": ["a"], **bad}), 422)
            assert says in error["message"] or says in str(error), (bad, error)


def test_batcher_respects_the_token_budget_and_isolates_failures():
    calls = []

    def run(texts, key):
        calls.append(list(texts))
        if "bad" in texts:
            raise ValueError("bad input")
        return [t.upper() for t in texts]

    async def scenario():
        batcher = DynamicBatcher(run, max_tokens=5, max_wait_s=0.02)
        jobs = [
            batcher.submit(["a b"]),
            batcher.submit(["c"]),
            batcher.submit(["d e f"]),
            batcher.submit(["bad"]),
            batcher.submit(["g"]),
        ]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        await batcher.close()
        return results

    results = asyncio.run(scenario())
    assert results[:3] == [["A B"], ["C"], ["D E F"]] and results[4] == ["G"]
    assert isinstance(results[3], ValueError)
    # tokens = words + 1: 3 + 2 fill the budget of 5; "bad" fails its batch, which is then retried request by request
    assert calls == [["a b", "c"], ["d e f"], ["bad", "g"], ["bad"], ["g"]]


# ---------------------------------------------------------------------------------------------------- classification
@pytest.fixture(scope="module")
def classifier(trained_run):
    """An untrained classifier on the run's tokenizer: enough to exercise the route (no training)."""
    from conftest import untrained_classifier

    return untrained_classifier(trained_run[0] / "tokenizer.model", ["neg", "neu", "pos"])


def test_classify_returns_labels_and_probabilities_in_order(classifier, sentences):
    with TestClient(create_app(classifier, limits=LIMITS)) as test_client:
        info = test_client.get("/v1/info").json()
        assert info["task"] == "classification" and info["labels"] == ["neg", "neu", "pos"]
        got = test_client.post("/v1/classify", json={"text": sentences[:4]}).json()["predictions"]
        probabilities = classifier.predict_proba(sentences[:4])
        for prediction, row in zip(got, probabilities.tolist()):
            assert list(prediction["probabilities"].values()) == pytest.approx(row, abs=1e-6)
            assert prediction["label"] == ["neg", "neu", "pos"][row.index(max(row))]
        assert error_of(test_client.post("/v1/classify", json={"text": ["a"] * 9}), 422)["limit"] == "max_sentences"
        assert (
            "beam: unknown field"
            in error_of(test_client.post("/v1/classify", json={"text": ["a"], "beam": 2}), 422)["message"]
        )
        assert test_client.post("/v1/translate", json={"text": ["a"]}).status_code == 404


def test_load_predictor_reads_the_run(trained_run):
    predictor, metadata = load_predictor(trained_run[0], device="cpu")
    assert type(predictor).__name__ == "Translator"
    assert metadata["languages"] == {"source": "en", "target": "xx"} and metadata["run"] == "run"
    with pytest.raises(ValueError, match="unknown engine"):
        load_predictor(trained_run[0], engine="onnx")
    with pytest.raises(TypeError, match="cannot serve"):
        create_app(object())


def test_the_ctranslate2_engine_serves_the_same_translations(trained_run, translator, sentences):
    pytest.importorskip("ctranslate2", reason="the export extra (ctranslate2) is not installed")
    predictor, metadata = load_predictor(trained_run[0], engine="ctranslate2", device="cpu")
    app = create_app(predictor, limits=LIMITS, engine="ctranslate2", metadata=metadata)
    with TestClient(app) as test_client:
        info = test_client.get("/v1/info").json()
        assert info["engine"] == "ctranslate2" and info["attention"] is False
        assert info["parameters"] == sum(p.numel() for p in translator.model.parameters())
        assert info["languages"] == {"source": "en", "target": "xx"}
        got = test_client.post("/v1/translate", json={"text": sentences[:6], "beam": 1}).json()["translations"]
        assert [t["text"] for t in got] == translator.translate(sentences[:6], beam=1)
        assert test_client.post("/v1/attention", json={"text": sentences[0]}).status_code == 404


def test_an_export_folder_is_served_with_what_its_run_said(trained_run, translator, sentences, tmp_path):
    """`transduce serve EXPORT --engine ctranslate2`: the folder keeps no run config; /v1/info still names the
    languages and the parameter count, recorded in the export's manifest."""
    pytest.importorskip("ctranslate2", reason="the export extra (ctranslate2) is not installed")
    from transduce.export.ctranslate2 import export_ctranslate2

    folder = export_ctranslate2(trained_run[0], tmp_path / "ct2")
    predictor, metadata = load_predictor(folder, engine="ctranslate2", device="cpu")
    assert metadata == {"run": "ct2", "languages": {"source": "en", "target": "xx"}}
    with TestClient(create_app(predictor, limits=LIMITS, engine="ctranslate2", metadata=metadata)) as test_client:
        info = test_client.get("/v1/info").json()
        assert info["parameters"] == sum(p.numel() for p in translator.model.parameters())
        got = test_client.post("/v1/translate", json={"text": sentences[:3], "beam": 1}).json()["translations"]
        assert [t["text"] for t in got] == translator.translate(sentences[:3], beam=1)


# ---------------------------------------------------------------------------------------------------- parsing
PARSE_SENTENCES = [
    "the dog sees a cat .",
    "every old teacher keeps this letter .",
    "a parser ( tree ) finds the river near a garden .",  # brackets in words: -LRB- / -RRB- in the tree
    "The dog barks .",  # words the treebank never had
    "the cat likes a big green tree in the garden .",
    "this river writes .",
]


def untrained_parse_run(root: Path) -> Path:
    """A prepared parsing run on a synthetic treebank with untrained weights (test_parsing's `tiny_run`, built from
    its helpers): every output of its Parser is still a tree over the input words, which is what serving must keep."""
    import torch
    from test_parsing import prepare_run, tiny_config, write_treebank

    from transduce.training.checkpoint import save_weights

    train = write_treebank(root / "train.trees", 200, seed=0)
    valid = write_treebank(root / "dev.trees", 20, seed=1)
    task = prepare_run(tiny_config(train, valid), root / "run")
    torch.manual_seed(0)
    save_weights(task.build_model(), root / "run" / "best.safetensors", metadata={"step": 0})
    return root / "run"


@pytest.fixture(scope="module")
def parse_run(tmp_path_factory):
    return untrained_parse_run(tmp_path_factory.mktemp("parse-serve"))


@pytest.fixture(scope="module")
def parser(parse_run):
    from transduce.decoding.parser import Parser

    return Parser.from_run(parse_run, device="cpu")


@pytest.fixture
def parse_client(parser):
    with TestClient(create_app(parser, limits=LIMITS)) as test_client:
        yield test_client


def test_parse_answers_one_tree_per_sentence_over_its_words(parse_client, parser):
    from transduce.data.trees import escape_word, parse_tree, words

    info = parse_client.get("/v1/info").json()
    assert info["task"] == "parsing" and info["attention"] is True
    assert info["decode_defaults"] == {"beam": parser.decode.beam, "alpha": parser.decode.alpha, "nbest": 1}
    paths = parse_client.get("/openapi.json").json()["paths"]
    assert {"/v1/parse", "/v1/attention"} <= set(paths) and "/v1/translate" not in paths
    text = PARSE_SENTENCES[:3] + [""] + PARSE_SENTENCES[3:]
    response = parse_client.post("/v1/parse", json={"text": text})
    assert response.status_code == 200, response.text
    got = response.json()["trees"]
    assert len(got) == len(text) and got[3] == {"tree": "", "words": []}
    for sentence, answer in zip(text, got):
        if sentence:
            tree = parse_tree(answer["tree"])
            assert tree.label == "ROOT"
            assert words(tree) == [escape_word(w) for w in sentence.split()]  # the leaves, in order
            assert answer["words"] == sentence.split()
    assert [t["tree"] for t in got] == parser.parse(text)
    greedy = parse_client.post("/v1/parse", json={"text": text[:2], "beam": 1, "alpha": 0.0}).json()["trees"]
    assert [t["tree"] for t in greedy] == parser.parse(text[:2], beam=1, alpha=0.0)


def test_info_reports_the_beam_bound_that_is_enforced(parser):
    """A parsing run's own default beam is above max_beam here: /v1/info reports the bound requests are held to."""
    beam = parser.decode.beam
    assert beam > 1
    with TestClient(create_app(parser, limits=Limits(max_beam=1))) as test_client:
        assert test_client.get("/v1/info").json()["limits"]["max_beam"] == beam
        assert test_client.post("/v1/parse", json={"text": ["a b"], "beam": beam}).status_code == 200
        error = error_of(test_client.post("/v1/parse", json={"text": ["a b"], "beam": beam + 1}), 422)
        assert error["limit"] == "max_beam" and error["max"] == beam


def test_attention_maps_are_bounded_in_pieces(translator, sentences):
    with TestClient(create_app(translator, limits=Limits(max_attention_pieces=4))) as test_client:
        error = error_of(test_client.post("/v1/attention", json={"text": sentences[0], "target": "a"}), 422)
        assert error["limit"] == "max_attention_pieces" and error["max"] == 4 and "the source has" in error["message"]
        long_target = " ".join(["a"] * 20)
        error = error_of(test_client.post("/v1/attention", json={"text": "a", "target": long_target}), 422)
        assert "the target has" in error["message"]
        assert test_client.get("/v1/info").json()["limits"]["max_attention_pieces"] == 4


@pytest.mark.parametrize(
    "body, limit",
    [
        ({"text": ["a"] * 9}, "max_sentences"),
        ({"text": ["a", "b" * 201]}, "max_chars"),
        ({"text": ["a"], "beam": 7}, "max_beam"),
    ],
)
def test_parse_limits_are_422_naming_the_limit(parse_client, body, limit):
    error = error_of(parse_client.post("/v1/parse", json=body), 422)
    assert error["limit"] == limit and error["max"] == getattr(LIMITS, limit)


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"text": ["a"], "nbest": 2}, "nbest: unknown field"),
        ({"text": ["a"], "beem": 3}, "beem: unknown field"),
        ({"text": []}, "text:"),
        ({"text": ["a"], "beam": 0}, "beam:"),
        ({"text": ["a"], "alpha": -1}, "alpha:"),
    ],
)
def test_bad_parse_requests_are_422_naming_the_field(parse_client, body, fragment):
    assert fragment in error_of(parse_client.post("/v1/parse", json=body), 422)["message"]


def test_a_sentence_longer_than_the_model_is_422_and_spares_the_others(parser):
    long = " ".join(["a"] * 95)  # 189 characters, but 95 words: a tree over them needs more than 96 positions
    app = create_app(parser, limits=LIMITS, max_wait_ms=50.0)
    bodies = [{"text": [PARSE_SENTENCES[0]]}, {"text": ["the cat sees a dog .", long]}]

    async def both():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            answers = await asyncio.gather(*(http.post("/v1/parse", json=b) for b in bodies))
        await app.state.service.batcher.close()
        return answers

    fine, refused = asyncio.run(both())
    assert fine.status_code == 200 and fine.json()["trees"][0]["tree"] == parser.parse(PARSE_SENTENCES[:1])[0]
    error = error_of(refused, 422)
    assert error["code"] == "too_long" and "line 2" in error["message"]


def test_parse_attention_is_pieces_by_tree_tokens(parse_client, parser):
    sentence = PARSE_SENTENCES[0]
    tree = parse_client.post("/v1/parse", json={"text": [sentence]}).json()["trees"][0]["tree"]
    explicit = parse_client.post("/v1/attention", json={"text": sentence, "target": tree}).json()
    assert explicit == parse_client.post("/v1/attention", json={"text": sentence}).json()  # default: its parse
    assert explicit["source_pieces"][-1] == "</s>" and explicit["target_pieces"][:2] == ["<s>", "(ROOT"]
    assert explicit["layers"] == len(parser.model.decoder.layers) and explicit["heads"] == parser.model.config.n_heads
    rows, cols = len(explicit["target_pieces"]), len(explicit["source_pieces"])
    head = explicit["cross"][-1][0]
    assert len(head) == rows and all(len(row) == cols for row in head)
    assert all(sum(row) == pytest.approx(1.0, abs=2e-3) for row in head)
    assert error_of(parse_client.post("/v1/attention", json={"text": "  "}), 422)["code"] == "invalid_request"
    bad_tree = parse_client.post("/v1/attention", json={"text": sentence, "target": "(ROOT (S"})
    assert error_of(bad_tree, 422)["code"] == "invalid_request"


def test_concurrent_parse_requests_are_batched_and_equal_one_at_a_time(parser):
    bodies = [{"text": [s]} for s in PARSE_SENTENCES] + [
        {"text": PARSE_SENTENCES[:2], "beam": 2},
        {"text": PARSE_SENTENCES[2:4], "beam": 2},
        {"text": ["", PARSE_SENTENCES[4]]},
    ]
    app = create_app(parser, limits=LIMITS, max_wait_ms=50.0)
    answers = asyncio.run(_concurrent(app, bodies, route="/v1/parse", key="trees"))
    batcher = app.state.service.batcher
    assert batcher.requests == len(bodies) and batcher.calls < len(bodies)  # requests shared model calls
    assert batcher.calls >= 2  # ... but only with equal options: the default beam, and beam 2
    for body, answer in zip(bodies, answers):
        alone = [parser.parse([s], beam=body.get("beam"))[0] for s in body["text"]]
        assert [t["tree"] for t in answer] == alone


def test_load_predictor_reads_a_parsing_run(parse_run, capsys):
    predictor, metadata = load_predictor(parse_run, device="cpu")
    assert type(predictor).__name__ == "Parser" and metadata == {"run": "run"}
    with pytest.raises(ConfigError, match="a parsing run is served with the torch engine only"):
        load_predictor(parse_run, engine="ctranslate2", device="cpu")
    # from the command line: one line naming the run, exit 1, no traceback, before any port is opened
    code = main(["serve", str(parse_run), "--engine", "ctranslate2", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    expected = f"{parse_run}: a parsing run is served with the torch engine only (--engine torch)"
    assert err.strip() == f"transduce serve: error: {expected}"


# ---------------------------------------------------------------------------------------------------- shutdown
SERVER_SCRIPT = """
import sys, time
from transduce.serving import create_app, run_server

class Slow:
    def translate_nbest(self, texts, **options):
        open({marker!r}, "w").close()  # the request is inside the model call
        time.sleep(1.5)
        return [[type("T", (), {{"text": t[::-1], "score": -1.0}})()] for t in texts]

run_server(create_app(Slow()), port={port}, graceful_timeout_s=10, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited early:\n{proc.stderr.read()}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("the server did not start")


def test_sigterm_finishes_in_flight_requests(tmp_path):
    port = free_port()
    script = tmp_path / "server.py"
    marker = tmp_path / "in-model"
    script.write_text(SERVER_SCRIPT.format(port=port, marker=str(marker)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url, proc)
        answers = []
        request = threading.Thread(
            target=lambda: answers.append(httpx.post(url + "/v1/translate", json={"text": ["abc"]}, timeout=20.0))
        )
        request.start()
        deadline = time.monotonic() + 20.0
        while not marker.exists() and time.monotonic() < deadline:  # wait until it is inside the 1.5 s model call
            time.sleep(0.05)
        assert marker.exists(), "the request never reached the model"
        proc.send_signal(signal.SIGTERM)
        request.join(timeout=20.0)
        # uvicorn re-raises the signal once it has shut down, so the exit is "killed by SIGTERM", but only now
        assert proc.wait(timeout=20.0) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["translations"][0]["text"] == "cba"


# ---------------------------------------------------------------------------------------------------- the command
def listening_address(port: int) -> str | None:
    """The IPv4 address a socket listening on `port` is bound to, read from /proc/net/tcp (Linux)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if int(hex_port, 16) == port and fields[3] == "0A":  # state 0A: LISTEN
            return socket.inet_ntoa(bytes.fromhex(address)[::-1])  # the kernel writes it little-endian
    return None


def test_the_serve_command_binds_loopback_and_translates(trained_run, translator, sentences):
    """`transduce serve RUN --port P` as a user types it: bound to 127.0.0.1 by default (no --host), the answers
    are the translator's, and SIGTERM ends it."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "transduce", "serve", str(trained_run[0]), "--port", str(port), "--device", "cpu"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url, proc)
        if Path("/proc/net/tcp").exists():
            assert listening_address(port) == "127.0.0.1"
        info = httpx.get(url + "/v1/info", timeout=10.0).json()
        assert info["task"] == "translation" and info["engine"] == "torch"
        answer = httpx.post(url + "/v1/translate", json={"text": sentences[:3], "beam": 2}, timeout=60.0)
        assert [t["text"] for t in answer.json()["translations"]] == translator.translate(sentences[:3], beam=2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30.0) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_the_load_benchmark_runs_both_modes(trained_run, tmp_path):
    """benchmarks/serve_load.py, bounded and small: both modes answer every request, and the figures are there."""
    import json

    source = tmp_path / "sources.txt"
    source.write_text((trained_run[1] / "test.en").read_text())
    script = ROOT / "benchmarks" / "serve_load.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    args = [str(trained_run[0]), "--src", str(source), "--clients", "4", "--requests", "12", "--device", "cpu"]
    # its own session, so that a timeout also stops the servers it started
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, stderr[-2000:]
    report = json.loads(stdout)
    assert [r["batching"] for r in report["results"]] == [False, True]
    for result in report["results"]:
        assert result["failed"] == 0  # every request answered 200
        assert result["server_batching"]["enabled"] is result["batching"]  # each mode is what the server ran
        assert result["seconds"] > 0 and result["latency_ms"]["p50"] > 0


def test_a_lone_surrogate_is_422_naming_the_text_on_every_route(client, classifier, parser):
    """JSON can carry "\\ud800" (not a Unicode character); every route answers 422 naming the text, never 500."""
    body = '{"text": ["fine", "\\ud800 broken"]}'
    headers = {"content-type": "application/json"}
    for route in ("/v1/translate", "/v1/attention"):
        one = body.replace('["fine", ', "").replace('"]', '"')  # attention takes one text
        sent = one if route == "/v1/attention" else body
        error = error_of(client.post(route, content=sent, headers=headers), 422)
        assert error["code"] == "invalid_text" and "U+D800" in error["message"]
    with TestClient(create_app(classifier, limits=LIMITS)) as test_client:
        error = error_of(test_client.post("/v1/classify", content=body, headers=headers), 422)
        assert error["code"] == "invalid_text" and error["index"] == 1
    with TestClient(create_app(parser, limits=LIMITS)) as test_client:
        error = error_of(test_client.post("/v1/parse", content=body, headers=headers), 422)
        assert error["code"] == "invalid_text" and "text 1" in error["message"]


@pytest.mark.parametrize("case", ["out of range", "in use", "bad host"])
def test_serve_refuses_a_bad_or_taken_address_in_one_line(tmp_path, capsys, case):
    """`serve --port 99999`, a port another server holds, an unknown host: one line, exit 1, before the model is
    even loaded (the run given does not exist)."""
    import socket

    from transduce.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        args = {
            "out of range": ["--port", "99999"],
            "in use": ["--port", str(port)],
            "bad host": ["--host", "no-such-host.invalid", "--port", str(port)],
        }[case]
        assert main(["serve", str(tmp_path / "no-run"), *args]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert {"out of range": "between 0 and 65535", "in use": "already in use", "bad host": "--host"}[case] in err


@pytest.mark.parametrize(
    "flag, value", [("--max-sentences", "0"), ("--max-sentences", "-5"), ("--timeout", "0"), ("--timeout", "nan")]
)
def test_serve_refuses_a_limit_that_bounds_nothing_at_start(tmp_path, capsys, flag, value):
    """A limit of 0, a negative one or NaN refuses every request or none: one line naming the flag, before the
    address is bound or the model loaded (the run given does not exist)."""
    assert main(["serve", str(tmp_path / "no-run"), flag, value]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"(serve {flag}) must be" in err and f"got {float(value) if flag == '--timeout' else value}" in err
    with pytest.raises(ConfigError, match="max_beam must be a whole number from 1 to 64"):
        Limits(max_beam=0)


def test_serve_warns_when_the_api_is_reachable_from_the_network(tmp_path, capsys):
    from transduce.serving.app import network_warning

    assert network_warning("127.0.0.1") is None and network_warning("localhost") is None
    assert network_warning("::1") is None
    assert main(["serve", str(tmp_path / "no-run"), "--host", "0.0.0.0", "--port", "0"]) == 1
    warning, error = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: --host 0.0.0.0 makes the server reachable from the network")
    assert "no authentication" in warning and "error:" in error


def test_serve_threads_sets_the_models_threads_and_refuses_a_negative_count(trained_run):
    import torch

    from transduce.serving.service import max_threads

    before = torch.get_num_threads()
    try:
        load_predictor(trained_run[0], engine="torch", device="cpu", threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    for threads in (-1, max_threads() + 1, 1000):  # 1000 on 2 cores ran 3,001 OS threads
        with pytest.raises(ConfigError, match=f"--threads must be 0 .* to {max_threads()} .*got {threads}"):
            load_predictor(trained_run[0], engine="torch", device="cpu", threads=threads)
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------------------------------------------- documents
def test_translate_splits_paragraphs_by_default_and_gives_links(client, translator):
    """Issue 73: the server takes each text as a paragraph (split "sentences" by default), answers word links on
    request, and translates a document of another format whole."""
    paragraph = "Red dog near the house. The cat sees over."
    got = client.post("/v1/translate", json={"text": [paragraph], "beam": 2}).json()["translations"][0]
    assert got["text"] == translator.translate(paragraph, split="sentences", beam=2)
    as_line = client.post("/v1/translate", json={"text": [paragraph], "beam": 2, "split": "lines"}).json()
    assert as_line["translations"][0]["text"] == translator.translate(paragraph, beam=2)
    linked = client.post("/v1/translate", json={"text": ["red dog near"], "beam": 2, "alignment": True}).json()
    out = linked["translations"][0]
    assert out["alignment"] and all(0 <= i < 3 and 0 <= j < len(out["text"].split()) for i, j in out["alignment"])
    html = "<p>red <b>dog</b> near <code>x  y</code></p>"
    doc = client.post("/v1/translate", json={"text": [html], "beam": 2, "format": "html"}).json()
    text = doc["translations"][0]["text"]
    assert text.count("<b>") == 1 and "<code>x  y</code>" in text and text.startswith("<p>")
    bad = client.post("/v1/translate", json={"text": ["<a><b></a>"], "format": "xml"})
    assert "text 0:1" in error_of(bad, 422)["message"]
    refused = client.post("/v1/translate", json={"text": [html], "format": "html", "alignment": True})
    assert error_of(refused, 422)["code"] == "invalid_request"
