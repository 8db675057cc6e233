"""--precision bf16: decoding and scoring in bfloat16 autocast (Translator's precision), refused where it is slow."""

import pytest
import torch
from conftest import run_cli

from transduce.cli import main
from transduce.config import ConfigError
from transduce.decoding.translator import Translator
from transduce.model import cpu_speed


@pytest.fixture
def native(monkeypatch):
    """Pretend the CPU computes bfloat16 natively (torch emulates it elsewhere: slow, but the same arithmetic)."""
    monkeypatch.setattr(cpu_speed, "native_bf16", lambda cpuinfo="/proc/cpuinfo": True)


def _linear_dtypes(translator: Translator) -> set[torch.dtype]:
    seen: set[torch.dtype] = set()
    for module in translator.model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out: seen.add(out.dtype))
    return seen


def test_bf16_translates_and_scores_in_bfloat16_close_to_float32(trained_run, native):
    run, corpus = trained_run
    sources = (corpus / "test.en").read_text().splitlines()[:20]
    fp32, bf16 = Translator.from_run(run, device="cpu"), Translator.from_run(run, device="cpu", precision="bf16")
    seen32, seen16 = _linear_dtypes(fp32), _linear_dtypes(bf16)
    out32, out16 = fp32.translate(sources, beam=4), bf16.translate(sources, beam=4)
    assert seen32 == {torch.float32} and seen16 == {torch.bfloat16}  # the products ran in bfloat16
    assert sum(a == b for a, b in zip(out32, out16)) >= 15  # rounding may change a near tie, not most outputs
    greedy32, greedy16 = fp32.translate(sources, beam=1), bf16.translate(sources, beam=1)
    assert sum(a == b for a, b in zip(greedy32, greedy16)) >= 15
    scores32, scores16 = fp32.score(sources, out32), bf16.score(sources, out32)
    for a, b in zip(scores32, scores16):
        assert a.tokens == b.tokens
        assert b.mean == pytest.approx(a.mean, abs=0.1)  # per-token log-probabilities within 0.1 nats
    assert torch.is_autocast_enabled("cpu") is False  # the autocast region ends with the call


def test_bf16_is_refused_on_a_cpu_without_native_bfloat16(trained_run, monkeypatch):
    run, _ = trained_run
    monkeypatch.setattr(cpu_speed, "native_bf16", lambda cpuinfo="/proc/cpuinfo": False)
    with pytest.raises(ConfigError, match="avx512_bf16"):
        Translator.from_run(run, device="cpu", precision="bf16")
    with pytest.raises(ConfigError, match="unknown precision"):
        Translator.from_run(run, device="cpu", precision="fp16")
    Translator.from_run(run, device="cpu", precision="fp32")  # float32 needs nothing


def test_precision_flag_is_the_torch_engines(trained_run, tmp_path):
    run, corpus = trained_run
    src, tgt = str(corpus / "test.en"), str(corpus / "test.de")
    for command in (["translate", str(run), "--input", src], ["score-pairs", str(run), "--src", src, "--tgt", tgt]):
        proc = run_cli(*command, "--engine", "ctranslate2", "--precision", "bf16", check=False)
        assert proc.returncode != 0
        assert "--precision applies to --engine torch" in proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_translate_and_score_pairs_take_precision_bf16(trained_run, tmp_path, native, monkeypatch, capsys):
    # in process, so that the pretended native bfloat16 holds on any CPU; the Translators built are recorded
    built: list[str] = []
    init = Translator.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self.precision)

    monkeypatch.setattr(Translator, "__init__", recording)
    run, corpus = trained_run
    src = tmp_path / "src.txt"
    src.write_text("".join(line + "\n" for line in (corpus / "test.en").read_text().splitlines()[:5]))
    assert main(["translate", str(run), "--input", str(src), "--precision", "bf16", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 5 and built == ["bf16"]
    (tmp_path / "tgt.txt").write_text("".join(line + "\n" for line in out))
    assert main(["score-pairs", str(run), "--src", str(src), "--tgt", str(tmp_path / "tgt.txt"), "--precision",
                 "bf16"]) == 0  # fmt: skip
    scores = capsys.readouterr().out.splitlines()
    assert len(scores) == 5 and all(float(line.split("\t")[0]) <= 0 for line in scores) and built == ["bf16"] * 2


def test_cli_refuses_bf16_on_a_cpu_without_native_bfloat16(trained_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cpu_speed, "native_bf16", lambda cpuinfo="/proc/cpuinfo": False)
    run, corpus = trained_run
    out = tmp_path / "out.txt"
    code = main(["evaluate", str(run), "--src", str(corpus / "test.en"), "--ref", str(corpus / "test.xx"), "--output",
                 str(out), "--precision", "bf16"])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "avx512_bf16" in err and "use fp32" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()  # refused before anything was written


def test_server_loads_a_bf16_translator_and_says_so(trained_run, native):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from transduce.serving import create_app, load_predictor

    run, corpus = trained_run
    predictor, metadata = load_predictor(run, device="cpu", precision="bf16")
    assert isinstance(predictor, Translator) and predictor.precision == "bf16"
    sentence = (corpus / "test.en").read_text().splitlines()[0]
    seen = _linear_dtypes(predictor)  # what the products computed in, in whichever thread the service runs them
    with TestClient(create_app(predictor, metadata=metadata)) as client:
        assert client.get("/v1/info").json()["precision"] == "bf16"
        reply = client.post("/v1/translate", json={"text": [sentence]})
        assert reply.status_code == 200 and seen == {torch.bfloat16}
        assert reply.json()["translations"][0]["text"] == predictor.translate(sentence)
    with pytest.raises(ConfigError, match="--engine torch only"):
        load_predictor(run, engine="ctranslate2", precision="bf16")
