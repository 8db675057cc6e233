"""The weight mapping to and from transformers' Marian/Pegasus layout (transduce.hf.layout), checked without
transformers: the width permutation keeps the network's function, and the two directions are inverse."""

import math

import numpy as np
import pytest
import torch

from transduce.config import ModelConfig
from transduce.hf.layout import (
    MARIAN,
    PEGASUS,
    LayoutError,
    from_marian,
    marian_positions,
    model_class,
    permute_width,
    to_marian,
    width_permutation,
)
from transduce.model import Transformer

SHAPES = {
    "postLN-tied": {},
    "postLN-untied": {"tie_embeddings": False},
    "preLN-tied": {"norm_first": True},
    "preLN-untied-2enc-1dec": {
        "norm_first": True,
        "tie_embeddings": False,
        "n_encoder_layers": 2,
        "n_decoder_layers": 1,
    },
}


def random_model(**settings) -> Transformer:
    """A model whose every weight is random (biases and LayerNorms too: a permutation that missed one shows)."""
    torch.manual_seed(0)
    shape = {"vocab_size": 40, "d_model": 24, "d_ff": 48, "n_heads": 3, "n_layers": 2, "dropout": 0.0, "max_len": 32}
    model = Transformer(ModelConfig(**{**shape, **settings})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def hf_table(n_pos: int, dim: int) -> torch.Tensor:
    """MarianSinusoidalPositionalEmbedding.create_weight (transformers 5), as its source writes it: the sines of the
    even columns' angles, then the cosines of the odd ones'."""
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    out = torch.empty(n_pos, dim)
    sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
    out[:, 0:sentinel] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, sentinel:] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    return out


@pytest.mark.parametrize("d_model", [24, 512, 9])
def test_the_permutation_maps_our_position_table_onto_marians(d_model):
    assert torch.allclose(marian_positions(64, d_model), hf_table(64, d_model), atol=1e-6, rtol=0)
    index = width_permutation(d_model)
    assert sorted(index.tolist()) == list(range(d_model))


@pytest.mark.parametrize("settings", SHAPES.values(), ids=SHAPES.keys())
def test_a_permuted_model_over_the_permuted_positions_computes_the_same_logits(settings):
    """The permutation applied to every weight on the width axis (our names, our model) with Marian's position table
    in place of ours: the same logits on a padded batch, teacher-forced and step by step."""
    ours = random_model(**settings)
    config = ours.config
    theirs = Transformer(config).eval()
    theirs.load_state_dict(permute_width(ours.state_dict(), config, width_permutation(config.d_model)))
    for embed in (theirs.encoder.embed, theirs.decoder.embed):
        embed.pe = hf_table(config.max_len, config.d_model)
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0]])
    tgt = torch.tensor([[2, 12, 13, 14, 15], [2, 16, 17, 0, 0]])
    with torch.no_grad():
        expected, got = ours(src, tgt), theirs(src, tgt)
        assert not torch.equal(ours.encode(src), theirs.encode(src))  # the hidden states are reordered ...
        assert torch.allclose(got, expected, atol=1e-5, rtol=0)  # ... the logits are not
        cache = theirs.start_decoding(theirs.encode(src), theirs.pad_mask(src))
        steps = torch.stack([theirs.decode_step(tgt[:, t], cache) for t in range(tgt.size(1))], dim=1)
    assert torch.allclose(steps, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("settings", SHAPES.values(), ids=SHAPES.keys())
def test_to_marian_then_from_marian_is_the_identity(settings):
    model = random_model(**settings)
    state, config = model.state_dict(), model.config
    theirs = to_marian(state, config)
    assert model_class(config) == (PEGASUS if config.norm_first else MARIAN)
    assert ("model.encoder.layer_norm.weight" in theirs) == config.norm_first
    assert theirs["final_logits_bias"].shape == (1, config.vocab_size) and not theirs["final_logits_bias"].any()
    back = from_marian(theirs, config)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)
    # as a saved file holds it: a tied matrix once, no position tables (MarianMTModel computes them)
    saved = {k: v for k, v in theirs.items() if "embed_positions" not in k}
    if config.tie_embeddings:
        for alias in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
            del saved[alias]
    again = from_marian(saved, config)
    assert all(torch.equal(again[k], state[k]) for k in state)
    if config.tie_embeddings:  # one matrix in our model again
        assert again["output.weight"] is again["encoder.embed.tokens.weight"]


def test_the_attention_heads_keep_their_blocks():
    """Only the residual stream's width is reordered: Q, K, V keep their rows (the heads' d_k blocks) and the
    output projection its columns."""
    model = random_model()
    config, state = model.config, model.state_dict()
    theirs = to_marian(state, config)
    index = width_permutation(config.d_model)
    for ours_name, their_name in (("encoder.layers.0.self_attn", "model.encoder.layers.0.self_attn"),):
        for proj in ("q_proj", "k_proj", "v_proj"):
            assert torch.equal(theirs[f"{their_name}.{proj}.weight"], state[f"{ours_name}.{proj}.weight"][:, index])
            assert torch.equal(theirs[f"{their_name}.{proj}.bias"], state[f"{ours_name}.{proj}.bias"])
        out = theirs[f"{their_name}.out_proj.weight"]
        assert torch.equal(out, state[f"{ours_name}.out_proj.weight"][index])
    assert math.isclose(float(theirs["model.encoder.embed_positions.weight"][1, 0]), math.sin(1.0), abs_tol=1e-7)


def test_states_that_do_not_fit_are_refused_naming_the_tensor():
    model = random_model()
    config = model.config
    theirs = to_marian(model.state_dict(), config)
    with pytest.raises(LayoutError, match="no place for: model.extra"):
        from_marian({**theirs, "model.extra": torch.zeros(1)}, config)
    with pytest.raises(LayoutError, match="fc2.bias"):
        from_marian({k: v for k, v in theirs.items() if k != "model.decoder.layers.1.fc2.bias"}, config)
    with pytest.raises(LayoutError, match="final_logits_bias is not zero"):
        from_marian({**theirs, "final_logits_bias": torch.ones(1, config.vocab_size)}, config)
    with pytest.raises(LayoutError, match="lm_head differ"):
        from_marian({**theirs, "lm_head.weight": theirs["lm_head.weight"] + 1}, config)
    with pytest.raises(LayoutError, match="lacks"):
        to_marian({k: v for k, v in model.state_dict().items() if "sublayer3" not in k}, config)
