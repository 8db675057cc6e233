"""LibreTranslate's API on `transduce serve` (serving/libretranslate.py): its request and response shapes, JSON and
form bodies, alternatives, `source: "auto"` and /detect, its error bodies and statuses, API keys and CORS, and
libretranslatepy (the PyPI client) against a live server, answering what the translator gives."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi, uvicorn) is not installed")
httpx = pytest.importorskip("httpx", reason="httpx is not installed")

from conftest import ROOT
from fastapi.testclient import TestClient
from test_serve import free_port, wait_until_up

from transduce.cli import main
from transduce.config import ConfigError
from transduce.serving import Limits, create_app
from transduce.serving.access import ApiKeys, check_origins, read_api_keys

LIMITS = Limits(max_sentences=8, max_chars=200, max_body_bytes=20_000, max_beam=6, timeout_s=20.0)
LANGUAGES = {"languages": {"source": "en", "target": "xx"}}
KEY = "k3y-for-the-tests-0123456789"
GERMAN = "Der Hund läuft heute Morgen schnell über die große Wiese hinter unserem Haus."
ENGLISH = "The dog runs quickly across the big meadow behind our house this morning."


@pytest.fixture(scope="module")
def translator(trained_run):
    from transduce.decoding.translator import Translator

    return Translator.from_run(trained_run[0])


@pytest.fixture(scope="module")
def sentences(trained_run):
    return (trained_run[1] / "test.en").read_text().splitlines()


def app_client(translator, **options):
    return TestClient(create_app(translator, limits=LIMITS, metadata=LANGUAGES, **options))


@pytest.fixture
def client(translator):
    with app_client(translator) as test_client:
        yield test_client


def best(translator, lines, **options):
    """What the translator gives for each line taken as a paragraph (the server's default split)."""
    decoded = translator.decode_lines(lines, split="sentences", **options)
    return [hypotheses[0].text if hypotheses else "" for hypotheses in decoded.hypotheses]


def error_of(response, status):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str), body  # LibreTranslate's shape
    return body["error"]


# ---------------------------------------------------------------------------------------------------- shapes
def test_languages_and_settings_report_the_pair_and_the_limits(client):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["xx"]},
        {"code": "xx", "name": "xx", "targets": []},
    ]
    settings = client.get("/frontend/settings").json()
    assert settings["charLimit"] == 200 and settings["batchLimit"] == 8 and settings["requestTimeout"] == 20.0
    assert settings["apiKeys"] is False and settings["keyRequired"] is False
    assert settings["language"] == {"source": {"code": "en", "name": "English"}, "target": {"code": "xx", "name": "xx"}}
    assert client.get("/health").json()["status"] == "ok"


def test_translate_a_string_or_a_list_as_the_translator_does(client, translator, sentences):
    paragraph = f"{sentences[0]}. {sentences[1]}."
    answer = client.post("/translate", json={"q": paragraph, "source": "en", "target": "xx"})
    assert answer.status_code == 200 and answer.json() == {"translatedText": best(translator, [paragraph])[0]}
    answer = client.post("/translate", json={"q": sentences[:5], "source": "en", "target": "xx", "format": "text"})
    assert answer.json() == {"translatedText": best(translator, sentences[:5])}
    assert client.post("/translate", json={"q": ["", sentences[0]], "source": "en", "target": "xx"}).json() == {
        "translatedText": ["", best(translator, sentences[:1])[0]]
    }


def test_form_and_multipart_bodies_and_the_query_string_translate_the_same(client, translator, sentences):
    expected = {"translatedText": best(translator, sentences[:1])[0]}
    fields = {"q": sentences[0], "source": "en", "target": "xx"}
    assert client.post("/translate", data=fields).json() == expected  # application/x-www-form-urlencoded
    assert client.post("/translate", data=fields, files={"unused": (None, "")}).json() == expected  # multipart
    assert client.post("/translate", params=fields).json() == expected
    two_lines = client.post("/translate", data={**fields, "q": f"{sentences[0]}\r\n{sentences[1]}"}).json()
    assert two_lines == {"translatedText": best(translator, [f"{sentences[0]}\n{sentences[1]}"])[0]}
    refused = client.post("/translate", data=fields, files={"q2": ("a.txt", b"a file")})
    assert "is a file" in error_of(refused, 400)


def test_alternatives_are_the_rest_of_the_nbest_list_within_the_beam_bound(client, translator, sentences):
    answer = client.post("/translate", json={"q": sentences[2], "source": "en", "target": "xx", "alternatives": 3})
    nbest = [h.text for h in translator.decode_lines([sentences[2]], beam=4, nbest=4, split="sentences").hypotheses[0]]
    assert answer.json()["translatedText"] == nbest[0]
    assert answer.json()["alternatives"] == [t for t in dict.fromkeys(nbest[1:]) if t not in (nbest[0], "")]
    assert len(answer.json()["alternatives"]) >= 1
    listed = client.post("/translate", data={"q": sentences[2], "source": "en", "target": "xx", "alternatives": "1"})
    assert isinstance(listed.json()["alternatives"], list)
    as_list = client.post("/translate", json={"q": sentences[:2], "source": "en", "target": "xx", "alternatives": 1})
    assert len(as_list.json()["alternatives"]) == 2 and all(isinstance(a, list) for a in as_list.json()["alternatives"])
    too_many = {"q": "a dog", "source": "en", "target": "xx", "alternatives": 6}  # beam 7 > max_beam 6
    assert error_of(client.post("/translate", json=too_many), 400) == (
        "Invalid request: alternatives parameter must be <= 5"
    )
    bad = {**too_many, "alternatives": "two"}
    assert (
        error_of(client.post("/translate", json=bad), 400) == "Invalid request: alternatives parameter is not a number"
    )


def test_html_keeps_its_markup_as_v1_translate_does(client):
    document = "<p>the big <b>dog</b> runs near the house</p>"
    answer = client.post("/translate", json={"q": document, "source": "en", "target": "xx", "format": "html"})
    v1 = client.post("/v1/translate", json={"text": [document], "format": "html"}).json()
    assert answer.json() == {"translatedText": v1["translations"][0]["text"]}
    assert "<b>" in answer.json()["translatedText"]
    with_alternatives = {"q": document, "source": "en", "target": "xx", "format": "html", "alternatives": 2}
    assert client.post("/translate", json=with_alternatives).json()["alternatives"] == []


# ---------------------------------------------------------------------------------------------------- languages
def test_source_auto_and_detect_choose_among_the_served_languages(client, translator, sentences):
    answer = client.post("/translate", json={"q": sentences[3], "source": "auto", "target": "xx"}).json()
    assert answer["translatedText"] == best(translator, sentences[3:4])[0]
    assert answer["detectedLanguage"]["language"] == "en" and 0 <= answer["detectedLanguage"]["confidence"] <= 100
    listed = client.post("/translate", json={"q": sentences[:2], "source": "auto", "target": "xx"}).json()
    assert [d["language"] for d in listed["detectedLanguage"]] == ["en", "en"]
    english = client.post("/detect", data={"q": ENGLISH}).json()
    german = client.post("/detect", json={"q": GERMAN}).json()
    assert [d["language"] for d in english] == ["en"] == [d["language"] for d in german]  # only en is served
    assert english[0]["confidence"] > 50 > german[0]["confidence"]  # how sure the identifier is that it is en


def test_the_identifier_is_restricted_to_the_served_languages():
    from transduce.serving.languages import LanguageIdentifier, language_name

    three = LanguageIdentifier(["en", "de", "fr"])
    assert three.best(GERMAN).language == "de" and three.best(ENGLISH).language == "en"
    assert three.best("Le chien court vite dans la grande prairie derrière notre maison.").language == "fr"
    assert len(three.rank(GERMAN)) == 3 and len(three.rank(GERMAN, most=2)) == 2
    two = LanguageIdentifier(["en", "fr"])  # German text: never "de", which is not served
    assert two.best(GERMAN).language in ("en", "fr") and two.best(GERMAN).confidence < 50
    assert LanguageIdentifier(["xx"]).rank("anything") == [LanguageIdentifier(["xx"]).best("x")]
    assert LanguageIdentifier(["xx"]).best("anything").confidence == 0.0
    assert language_name("de") == "German" and language_name("pt-BR") == "Portuguese" and language_name("q1") == "q1"


# ---------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "route, body, message",
    [
        ("/translate", {}, "Invalid request: missing q parameter"),
        ("/translate", {"q": ""}, "Invalid request: missing q parameter"),
        ("/translate", {"q": [], "source": "en", "target": "xx"}, "Invalid request: missing q parameter"),
        ("/translate", {"q": "a dog"}, "Invalid request: missing source parameter"),
        ("/translate", {"q": "a dog", "source": "en"}, "Invalid request: missing target parameter"),
        ("/detect", {}, "Invalid request: missing q parameter"),
        ("/translate", {"q": 5, "source": "en", "target": "xx"}, "q parameter must be a string or a list"),
        ("/translate", {"q": ["a", 1], "source": "en", "target": "xx"}, "q parameter must be a string or a list"),
        ("/translate", {"q": "a", "source": ["en"], "target": "xx"}, "source parameter must be a string"),
    ],
)
def test_missing_or_malformed_parameters_are_400_with_libretranslates_message(client, route, body, message):
    assert message in error_of(client.post(route, json=body), 400)
    if all(isinstance(v, str) for v in body.values()):  # a form says the same
        assert message in error_of(client.post(route, data=body), 400)


def test_a_body_that_is_not_a_json_object_is_400(client):
    for content in (b"{not json", b"[1, 2]", b'"a string"', b"\xff\xfe"):
        answer = client.post("/translate", content=content, headers={"content-type": "application/json"})
        assert error_of(answer, 400) == "Invalid JSON format"
    answer = client.post("/translate", content=b"<q>x</q>", headers={"content-type": "application/xml"})
    assert "send JSON or a form" in error_of(answer, 400)
    broken = client.post("/translate", content=b"--x\r\n", headers={"content-type": "multipart/form-data; boundary=y"})
    assert "malformed multipart" in error_of(broken, 400)


def test_an_unserved_language_pair_or_format_is_400(client):
    def refused(body):
        return error_of(client.post("/translate", json={"q": "a dog", **body}), 400)

    assert refused({"source": "de", "target": "xx"}) == "de is not supported"
    assert refused({"source": "en", "target": "fr"}) == "fr is not supported"
    assert (
        refused({"source": "xx", "target": "en"}) == "English (en) is not available as a target language from xx (xx)"
    )
    assert refused({"source": "en", "target": "en"}) == (
        "English (en) is not available as a target language from English (en)"
    )
    assert refused({"source": "en", "target": "xx", "format": "xml"}) == "xml format is not supported"
    assert client.post("/translate", json={"q": "a dog", "source": "EN", "target": "XX"}).status_code == 200


def test_limits_are_libretranslates_400_and_a_large_body_413_in_its_shape(client):
    nine = {"q": ["a dog"] * 9, "source": "en", "target": "xx"}
    assert error_of(client.post("/translate", json=nine), 400) == "Invalid request: request (9) exceeds text limit (8)"
    long = {"q": "a " * 101, "source": "en", "target": "xx"}
    assert (
        error_of(client.post("/translate", json=long), 400) == "Invalid request: request (202) exceeds text limit (200)"
    )
    assert "exceeds text limit" in error_of(client.post("/detect", json={"q": "a " * 101}), 400)
    huge = {"q": "a" * 30_000, "source": "en", "target": "xx"}
    assert "over 20000 bytes" in error_of(client.post("/translate", json=huge), 413)
    surrogate = b'{"q": "a \\ud800 dog", "source": "en", "target": "xx"}'
    answer = client.post("/translate", content=surrogate, headers={"content-type": "application/json"})
    assert "lone surrogate" in error_of(answer, 400)
    assert client.post("/v1/translate", json={"text": ["a"] * 9}).json()["error"]["limit"] == "max_sentences"


def test_a_model_failure_is_libretranslates_500_without_a_traceback():
    class Broken:
        def translate_nbest(self, texts, **options):
            raise RuntimeError("the model broke")

    with TestClient(create_app(Broken(), limits=LIMITS, metadata=LANGUAGES), raise_server_exceptions=False) as client:
        answer = client.post("/translate", json={"q": "a dog", "source": "en", "target": "xx"})
        assert error_of(answer, 500) == "Cannot translate text: the server failed on this request (RuntimeError)"


def test_a_run_without_languages_has_no_libretranslate_routes(translator):
    with TestClient(create_app(translator, limits=LIMITS)) as client:
        assert client.post("/translate", json={"q": "a", "source": "en", "target": "xx"}).status_code == 404
        assert client.get("/languages").status_code == 404


# ---------------------------------------------------------------------------------------------------- keys, CORS
def test_api_keys_guard_the_model_routes_and_nothing_else(translator):
    keys = ApiKeys.of([KEY, "another-key-0123456789"])
    body = {"q": "a dog", "source": "en", "target": "xx"}
    with app_client(translator, api_keys=keys) as client:
        for route, params in (("/translate", body), ("/detect", {"q": "a dog"})):
            assert (
                error_of(client.post(route, json=params), 403) == "Please contact the server operator to get an API key"
            )
            assert error_of(client.post(route, json={**params, "api_key": "wrong"}), 403) == "Invalid API key"
            assert error_of(client.post(route, data={**params, "api_key": KEY[:-1]}), 403) == "Invalid API key"
            assert client.post(route, json={**params, "api_key": KEY}).status_code == 200
            assert client.post(route, data={**params, "api_key": KEY}).status_code == 200
            assert client.post(route, json=params, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        denied = client.post("/v1/translate", json={"text": ["a dog"]})
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "invalid_api_key"
        assert client.get("/v1/info", headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert client.get("/v1/info", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        answer = client.post("/v1/translate", json={"text": ["a dog"]}, headers={"Authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200
        for open_route in ("/health", "/languages", "/frontend/settings", "/"):
            assert client.get(open_route).status_code == 200
        assert client.get("/frontend/settings").json()["keyRequired"] is True
    assert keys.accepts(KEY) and not keys.accepts(None) and not keys.accepts("") and not keys.accepts(KEY + "x")


def test_cors_headers_only_when_asked(translator):
    origin = "https://reader.example"
    preflight = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    body = {"q": "a dog", "source": "en", "target": "xx"}
    with app_client(translator) as client:
        answer = client.post("/translate", json=body, headers={"Origin": origin})
        assert answer.status_code == 200 and not any(h.startswith("access-control-") for h in answer.headers)
        assert not any(h.startswith("access-control-") for h in client.options("/translate", headers=preflight).headers)
    with app_client(translator, cors=[origin], api_keys=ApiKeys.of([KEY])) as client:
        answer = client.options("/translate", headers=preflight)  # no key: a preflight carries none
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin
        answer = client.post("/translate", json={**body, "api_key": KEY}, headers={"Origin": origin})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin
        assert (
            client.post("/v1/translate", json={"text": ["a"]}, headers={"Origin": origin}).headers[
                "access-control-allow-origin"
            ]
            == origin
        )  # a 403 a page can read
        other = client.post("/translate", json={**body, "api_key": KEY}, headers={"Origin": "https://other.example"})
        assert "access-control-allow-origin" not in other.headers
    with app_client(translator, cors=["*"]) as client:
        assert client.get("/languages", headers={"Origin": origin}).headers["access-control-allow-origin"] == "*"


def test_keys_files_and_origins_are_checked_in_one_line(tmp_path):
    good = tmp_path / "keys"
    good.write_text(f"# the reader app\n{KEY}\n\n  another-key-0123456789  \n")
    assert len(read_api_keys(good)) == 2 and read_api_keys(good).accepts("another-key-0123456789")
    cases = {
        "missing": (None, "cannot read it"),
        "empty": ("# nothing\n\n", "holds no key"),
        "short": ("short\n", "line 1: a key of 5 characters"),
        "spaced": (f"{KEY} {KEY}\n", "visible ASCII characters without spaces"),
        "binary": (b"\xff\xfe\x00", "not UTF-8"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        with pytest.raises(ConfigError, match=message):
            read_api_keys(path)
    assert check_origins(["https://a.example", "moz-extension://1234-abcd", "http://localhost:8080", "*"])
    for origin in ("https://a.example/", "a.example", "https://a.example/path", ""):
        with pytest.raises(ConfigError, match="not an origin"):
            check_origins([origin])


@pytest.mark.parametrize(
    "flags, message", [(["--api-keys", "no-such-file"], "--api-keys"), (["--cors", "x.org"], "--cors")]
)
def test_serve_refuses_a_bad_keys_file_or_origin_before_loading(tmp_path, capsys, flags, message):
    """One line, exit 1, before the model is loaded (the run given does not exist)."""
    assert main(["serve", str(tmp_path / "no-run"), *flags]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and message in err


def test_keys_silence_the_network_warning():
    from transduce.serving.app import network_warning

    assert network_warning("0.0.0.0") is not None and network_warning("0.0.0.0", keys=True) is None


# ---------------------------------------------------------------------------------------------------- a real client
def test_libretranslatepy_against_transduce_serve(trained_run, translator, sentences, tmp_path):
    """libretranslatepy (PyPI) against `transduce serve RUN --api-keys FILE --cors ORIGIN`: languages, detect, and
    translate of every line of the test file gives what the translator gives (split into sentences, as the server
    does); a wrong key is 403; the origin gets CORS headers."""
    from urllib.error import HTTPError

    from libretranslatepy import LibreTranslateAPI

    keys = tmp_path / "keys"
    keys.write_text(KEY + "\n")
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "transduce", "serve", str(trained_run[0]), "--port", str(port), "--device", "cpu"]
    origin = "http://reader.example"
    flags = ["--api-keys", str(keys), "--cors", origin]
    proc = subprocess.Popen([*command, *flags], env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url, proc)
        api = LibreTranslateAPI(url, api_key=KEY)
        assert [(lang["code"], lang["targets"]) for lang in api.languages(timeout=10)] == [("en", ["xx"]), ("xx", [])]
        assert api.detect(sentences[0], timeout=30)[0]["language"] == "en"
        answers = [api.translate(line, "en", "xx", timeout=60) for line in sentences]
        expected = best(translator, sentences)
        assert sum(a == e for a, e in zip(answers, expected)) == len(sentences) == 30  # 100% of the file
        with pytest.raises(HTTPError) as refused:
            LibreTranslateAPI(url, api_key="wrong-key-0123456789").translate(sentences[0], "en", "xx", timeout=10)
        assert refused.value.code == 403
        assert (
            httpx.get(url + "/languages", headers={"Origin": origin}).headers["access-control-allow-origin"] == origin
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()
