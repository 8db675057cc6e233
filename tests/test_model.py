import math

import pytest
import torch
from torch import nn

from transduce import ModelConfig, Transformer
from transduce.config import ConfigError
from transduce.model.cpu_speed import BitDropout as Dropout
from transduce.model.transformer import attention_mask, sinusoidal_encoding

V = 40


def tiny(**kw) -> ModelConfig:
    settings = dict(vocab_size=V, n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, max_len=64)
    settings.update(kw)
    return ModelConfig(**settings)


def batch(seed=0, b=3, s=7, t=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (b, s), generator=g)
    src[0, 4:] = 0  # padding
    tgt = torch.randint(4, V, (b, t), generator=g)
    return src, tgt


def test_parameter_counts_match_the_paper_architecture():
    assert Transformer(ModelConfig.base(vocab_size=37000)).num_parameters() == 63_082_496
    assert Transformer(ModelConfig.big(vocab_size=37000)).num_parameters() == 214_245_376


def test_presets_have_table3_shapes():
    big = ModelConfig.big(vocab_size=100)
    assert (big.d_model, big.d_ff, big.n_heads, big.dropout, big.n_layers) == (1024, 4096, 16, 0.3, 6)
    base = ModelConfig.base(vocab_size=100)
    assert (base.d_model, base.d_ff, base.n_heads, base.dropout, base.d_k) == (512, 2048, 8, 0.1, 64)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(d_model=30, n_heads=4), r"model.d_model \(30\) must be divisible by model.n_heads \(4\)"),
        (dict(d_ff=-1), r"model.d_ff must be at least 1, got -1"),
        (dict(n_layers=0), r"model.n_layers must be at least 1, got 0"),
        (dict(dropout=1.5), r"model.dropout must be in \[0, 1\), got 1.5"),
        (dict(activation_dropout=1.0), r"model.activation_dropout must be in \[0, 1\), got 1.0"),
        (dict(positional="rotary"), r"model.positional must be 'sinusoidal' or 'learned', got 'rotary'"),
        (dict(activation="tanh"), r"model.activation must be one of relu, swish, gelu, got 'tanh'"),
    ],
)
def test_impossible_shapes_are_refused(bad, message):
    with pytest.raises(ConfigError, match=message):
        tiny(**bad)


def test_positional_encoding_equals_the_formula():
    pe = sinusoidal_encoding(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_drops_at_rate_p_and_scales_the_rest(p):
    torch.manual_seed(0)
    drop = Dropout(p).train()
    x = torch.ones(250_001, 4)  # an element count that is not a multiple of 4
    y = drop(x)
    dropped = y.eq(0)
    assert y[~dropped].allclose(torch.tensor(1 / (1 - p)))
    # each of the four 16-bit pieces of a random word has its own threshold: check every piece's rate
    for piece in range(4):
        rate = dropped.view(-1)[piece::4].float().mean().item()
        assert abs(rate - p) < 0.004, (piece, rate)
    assert abs(y.mean().item() - 1.0) < 0.005  # inverted dropout keeps the expectation
    y2 = drop(x)
    assert not torch.equal(dropped, y2.eq(0))  # a fresh mask each call
    torch.manual_seed(0)
    assert torch.equal(drop(x), y)  # drawn from torch's generator: seeded runs repeat
    x.requires_grad_(True)
    torch.manual_seed(0)
    drop(x).sum().backward()
    assert torch.equal(x.grad, y)  # gradient = mask / (1 - p)
    assert torch.equal(drop.eval()(x), x)
    with pytest.raises(ValueError, match="dropout must be in"):
        Dropout(1.0)


def test_embeddings_are_scaled_and_tied():
    model = Transformer(tiny()).eval()
    enc, dec = model.encoder.embed, model.decoder.embed
    assert enc.tokens.weight is dec.tokens.weight is model.output.weight
    tokens = torch.tensor([[5, 6, 7]])
    expected = model.encoder.embed.tokens.weight[tokens] * math.sqrt(32) + sinusoidal_encoding(3, 32)
    assert torch.allclose(enc(tokens), expected, atol=1e-6)
    untied = Transformer(tiny(tie_embeddings=False))
    assert untied.encoder.embed.tokens.weight is not untied.output.weight
    assert untied.num_parameters() == Transformer(tiny()).num_parameters() + 2 * V * 32


def _copy_attention(ours, theirs: nn.MultiheadAttention):
    theirs.in_proj_weight.data.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
    theirs.in_proj_bias.data.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    theirs.out_proj.weight.data.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.data.copy_(ours.out_proj.bias)


def _copy_common(ours, theirs, norms):
    theirs.linear1.load_state_dict(ours.ff.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.ff.linear2.state_dict())
    for our_sublayer, their_norm in zip(norms, (theirs.norm1, theirs.norm2, getattr(theirs, "norm3", None))):
        their_norm.load_state_dict(our_sublayer.norm.state_dict())


@pytest.mark.parametrize("norm_first", [False, True])
def test_layers_equal_torch_nn_layers(norm_first):
    torch.manual_seed(0)
    model = Transformer(tiny(norm_first=norm_first)).eval()
    kw = dict(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
    )
    ref_enc, ref_dec = nn.TransformerEncoderLayer(**kw).eval(), nn.TransformerDecoderLayer(**kw).eval()
    ours_enc, ours_dec = model.encoder.layers[0], model.decoder.layers[0]
    _copy_attention(ours_enc.self_attn, ref_enc.self_attn)
    _copy_common(ours_enc, ref_enc, [ours_enc.sublayer1, ours_enc.sublayer2])
    _copy_attention(ours_dec.self_attn, ref_dec.self_attn)
    _copy_attention(ours_dec.cross_attn, ref_dec.multihead_attn)
    _copy_common(ours_dec, ref_dec, [ours_dec.sublayer1, ours_dec.sublayer2, ours_dec.sublayer3])

    x, y = torch.randn(3, 7, 32), torch.randn(3, 5, 32)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[0, 4:] = True
    mask = attention_mask(pad, query_len=7, key_len=7)
    ours = ours_enc(x, mask)
    with torch.no_grad():
        theirs = ref_enc(x, src_key_padding_mask=pad)
    real = ~pad
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)

    memory_kv = ours_dec.cross_attn.project_kv(x)
    ours = ours_dec(y, memory_kv, None, attention_mask(pad, query_len=5, key_len=7), causal=True)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        theirs = ref_dec(y, x, tgt_mask=causal, memory_key_padding_mask=pad, tgt_is_causal=True)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_pre_ln_stacks_end_with_a_layer_norm():
    model = Transformer(tiny(norm_first=True))
    assert isinstance(model.encoder.final_norm, nn.LayerNorm) and isinstance(model.decoder.final_norm, nn.LayerNorm)
    post = Transformer(tiny())
    assert post.encoder.final_norm is None and post.decoder.final_norm is None


def test_padding_does_not_change_outputs():
    model = Transformer(tiny()).eval()
    src, tgt = batch()
    padded = torch.cat([src, torch.zeros(3, 5, dtype=torch.long)], dim=1)
    assert torch.allclose(model(src, tgt), model(padded, tgt), atol=1e-5)
    memory, memory_padded = model.encode(src), model.encode(padded)
    assert torch.allclose(memory[:, :4], memory_padded[:, :4], atol=1e-5)


def test_decoder_cannot_see_the_future():
    model = Transformer(tiny()).eval()
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % V
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-4)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(norm_first=True),
        dict(positional="learned"),
        dict(attention_window=2),
    ],
)
def test_cached_decoding_equals_full_decoding(kw):
    model = Transformer(tiny(**kw)).eval()
    src, tgt = batch()
    full = model(src, tgt)
    cache = model.start_decoding(model.encode(src), model.pad_mask(src))
    steps = torch.stack([model.decode_step(tgt[:, t], cache) for t in range(tgt.size(1))], dim=1)
    assert torch.allclose(full, steps, atol=1e-5)


def test_restricted_attention_window():
    r = 1
    model = Transformer(tiny(attention_window=r)).eval()
    src, tgt = batch(s=8, t=7)
    with model.recording_attention():
        model(src, tgt)
    enc = model.encoder.layers[0].self_attn.weights  # (B, H, S, S)
    dec = model.decoder.layers[0].self_attn.weights  # (B, H, T, T)
    cross = model.decoder.layers[0].cross_attn.weights  # (B, H, T, S)
    i = torch.arange(8).unsqueeze(1)
    j = torch.arange(8).unsqueeze(0)
    outside = (i - j).abs() > r
    real_rows = slice(1, 3)  # sentences without padding
    assert enc[real_rows][:, :, outside].abs().max() == 0
    assert enc[real_rows][:, :, ~outside].min() > 0
    i, j = torch.arange(7).unsqueeze(1), torch.arange(7).unsqueeze(0)
    assert dec[:, :, (j > i) | (i - j > r)].abs().max() == 0
    assert dec[:, :, (j <= i) & (i - j <= r)].min() > 0
    assert cross[1:].min() > 0  # encoder-decoder attention is not restricted
    assert not torch.isnan(model(src, tgt)).any()


def test_attention_weights_rows_sum_to_one_and_padding_gets_zero():
    model = Transformer(tiny()).eval()
    src, tgt = batch()
    with model.recording_attention():
        model(src, tgt)
    w = model.decoder.layers[1].cross_attn.weights
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)
    assert w[0, :, :, 4:].abs().max() == 0


def test_model_overfits_eight_pairs():
    torch.manual_seed(0)
    model = Transformer(tiny(dropout=0.1))
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (8, 6), generator=g)
    tgt = torch.randint(4, V, (8, 6), generator=g)
    tgt_in = torch.cat([torch.full((8, 1), 2), tgt[:, :-1]], dim=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    losses = []
    for _ in range(150):
        loss = nn.functional.cross_entropy(model(src, tgt_in).reshape(-1, V), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 3.0 and losses[-1] < 0.05


def test_activation_dropout_acts_on_the_ffn_hidden_units_only_in_training():
    """activation_dropout zeroes ReLU outputs of the FFN while training (so the output changes with the mask) and
    is the identity in eval mode; with 0 there is no extra module, and the parameter count never changes."""
    from transduce.model.transformer import FeedForward

    torch.manual_seed(0)
    ff = FeedForward(d_model=8, d_ff=64, activation_dropout=0.5)
    x = torch.randn(4, 8)
    hidden = torch.relu(ff.linear1(x))
    ff.train()
    torch.manual_seed(1)
    out = ff(x)
    assert not torch.allclose(out, ff.linear2(hidden))
    ff.eval()
    assert torch.allclose(ff(x), ff.linear2(hidden))
    assert FeedForward(d_model=8, d_ff=64).dropout is None
    plain, with_dropout = Transformer(tiny()), Transformer(tiny(activation_dropout=0.2))
    assert plain.num_parameters() == with_dropout.num_parameters()


@pytest.mark.parametrize("name, function", [("swish", torch.nn.functional.silu), ("gelu", torch.nn.functional.gelu)])
def test_activation_setting_replaces_the_relu_of_eq2(name, function):
    """model.activation picks the FFN's non-linearity (Marian models use swish); the default is Eq. 2's ReLU."""
    from transduce.model.transformer import FeedForward

    torch.manual_seed(0)
    x = torch.randn(4, 8)
    ff = FeedForward(d_model=8, d_ff=16, activation=name)
    assert torch.allclose(ff(x), ff.linear2(function(ff.linear1(x))))
    relu = FeedForward.of(tiny())
    assert relu.activation is torch.nn.functional.relu
    assert Transformer(tiny(activation=name)).encoder.layers[0].ff.activation is function


def test_scale_embeddings_false_adds_the_raw_embedding_to_the_positions():
    """model.scale_embeddings (default true: x sqrt(d_model), §3.4); false: the embedding as it is (Marian's
    scale_embedding = false)."""
    torch.manual_seed(0)
    tokens = torch.tensor([[5, 6, 7]])
    for scaled in (True, False):
        model = Transformer(tiny(scale_embeddings=scaled)).eval()
        embed = model.encoder.embed
        expected = embed.tokens(tokens) * (math.sqrt(32) if scaled else 1.0) + embed.pe[:3]
        assert torch.allclose(embed(tokens), expected)


def test_output_bias_is_added_to_the_logits_and_off_by_default():
    """model.output_bias: a learned bias on the pre-softmax projection (Marian's final_logits_bias); without it
    the parameters and the state dict are those of the paper's model."""
    assert Transformer(tiny()).output.bias is None
    assert "output.bias" not in Transformer(tiny()).state_dict()
    torch.manual_seed(0)
    model = Transformer(tiny(output_bias=True)).eval()
    assert model.num_parameters() == Transformer(tiny()).num_parameters() + V
    src, tgt = batch()
    before = model(src, tgt)
    with torch.no_grad():
        model.output.bias.copy_(torch.arange(V, dtype=torch.float32))
    assert torch.allclose(model(src, tgt) - before, torch.arange(V, dtype=torch.float32).expand_as(before), atol=1e-5)
    assert model.output.weight is model.decoder.embed.tokens.weight  # still tied
