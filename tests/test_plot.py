import matplotlib.image as mpimg
import numpy as np
import torch
from conftest import run_cli

from transduce.decoding.translator import Translator
from transduce.plot import plot_attention, plot_curves, plot_token_attention, read_metrics


def _png_size(path):
    image = mpimg.imread(path)
    return image.shape[1], image.shape[0]  # width, height


def test_attention_heatmaps_show_the_models_weights(trained_run, tmp_path):
    run, _ = trained_run
    translator = Translator.from_run(run)
    maps = translator.attention("the red dog sees a cat", "CAT A SEES DOG RED THE")
    assert maps.source_pieces[-1] == "</s>" and maps.target_pieces[0] == "<s>"
    layers = translator.model.config.n_layers
    heads = translator.model.config.n_heads
    assert maps.encoder.shape == (layers, heads, len(maps.source_pieces), len(maps.source_pieces))
    assert maps.cross.shape == (layers, heads, len(maps.target_pieces), len(maps.source_pieces))
    for weights in (maps.encoder, maps.decoder, maps.cross):
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)  # rows sum to 1
    t = len(maps.target_pieces)
    assert maps.decoder[:, :, torch.triu(torch.ones(t, t, dtype=torch.bool), 1)].abs().max() == 0  # no future

    drawn = plot_attention(maps, tmp_path / "pics", layers=[-1], formats=("png", "svg"))
    assert set(drawn) == {f"encoder_L{layers}", f"decoder_L{layers}", f"cross_L{layers}"}
    for name, (files, matrices) in drawn.items():
        kind = name.split("_")[0]
        expected = getattr(maps, kind)[-1].numpy()
        assert np.array_equal(matrices, expected)  # the picture shows exactly the model's weights
        png, svg = files
        width, height = _png_size(png)
        assert width >= 300 and height >= 300
        assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()[:2000]

    rows = plot_token_attention(maps, 2, tmp_path / "token.png", kind="encoder")
    assert np.array_equal(rows, maps.encoder[-1, :, 2].numpy())
    assert _png_size(tmp_path / "token.png")[0] > 100


def test_attention_cli_uses_the_models_own_translation(trained_run, tmp_path):
    run, _ = trained_run
    proc = run_cli(
        "attention",
        str(run),
        "--src",
        "the dog sees a cat",
        "--out",
        str(tmp_path / "a"),
        "--layer",
        "1",
        "--token",
        "the",
        "--format",
        "png",
    )
    assert "target: <s>" in proc.stdout
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == [
        "cross_L1.png",
        "decoder_L1.png",
        "encoder_L1.png",
        "token_encoder_0_L1.png",
        "transduce-manifest.json",
    ]
    bad = run_cli(
        "attention", str(run), "--src", "the dog", "--out", str(tmp_path / "b"), "--token", "zebra", check=False
    )
    assert bad.returncode == 1 and "not one of the pieces" in bad.stderr


def test_training_curves_overlay_runs(trained_run, tmp_path):
    run, _ = trained_run
    plotted = plot_curves([run, run], tmp_path / "curves.png")
    train, valid = read_metrics(run)
    series = plotted[run.name]
    assert series["loss"] == [r["loss"] for r in train] and series["valid_bleu"] == [r["valid_bleu"] for r in valid]
    assert _png_size(tmp_path / "curves.png") == (1200, 640)
    proc = run_cli("plot", str(run), "--out", str(tmp_path / "c.svg"))
    assert (tmp_path / "c.svg").read_text().count("<svg") == 1 and "wrote" in proc.stdout
    bad = run_cli("plot", str(tmp_path), "--out", str(tmp_path / "x.png"), check=False)
    assert bad.returncode == 1 and "metrics.jsonl" in bad.stderr


def test_curves_plot_a_parsing_runs_f1(tmp_path):
    """A parsing run logs valid_f1, not valid_bleu: the score panel draws F1 (and says so)."""
    import json

    run = tmp_path / "parse"
    run.mkdir()
    records = [
        {"kind": "train", "step": s, "loss": 3.0 - s / 100, "lr": 1e-3, "elapsed": 6.0 * s} for s in (10, 20, 30)
    ] + [{"kind": "valid", "step": s, "elapsed": 6.0 * s, "valid_loss": 2.0, "valid_f1": s * 2.0} for s in (10, 30)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    series = plot_curves([run], tmp_path / "f1.svg")["parse"]
    assert series["valid_f1"] == [20.0, 60.0] and series["valid_bleu"] == [None, None]
    svg = (tmp_path / "f1.svg").read_text(encoding="utf-8")
    assert "validation F1" in svg and "validation BLEU" not in svg
