"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), in the paper's order (§3.2.1 -> §3.5).

Axis legend used in the shape comments:
    B batch (sentences, or sentences x beams while decoding)    S source length    T target length
    D d_model    H heads    K d_k = d_v = D / H    F d_ff    V vocabulary size    L any sequence length

Masks follow one convention: `pad_mask` is True where a token is padding. They are turned into the boolean masks
of `torch.nn.functional.scaled_dot_product_attention` (True = may attend) in exactly one place: `attention_mask`.

Departures from the paper, all named: LayerNorm eps is 1e-5 and divides by sqrt(variance + eps) (the paper does not
say); `norm_first=True` gives the pre-LN variant with a final LayerNorm per stack; `attention_dropout` and
`activation_dropout` (default 0), learned positions, the FFN's activation, the embedding scale and an output bias
(Marian's) are options; padded query rows of a restricted (windowed) self-attention attend to themselves so that no
softmax row is empty (their outputs are never read).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError, ModelConfig
from ..config.memory import check_fits, model_shape
from .alignment import AlignmentHead
from .cache import DecoderCache  # the decoding state (cache.py), importable from here too


# §3.5 Positional encoding ------------------------------------------------------------------------------------------
def sinusoidal_encoding(length: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)). -> (L, D)"""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (L, ceil(D/2))
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


def attention_mask(
    key_pad_mask: Tensor | None,
    *,
    query_len: int,
    key_len: int,
    causal: bool = False,
    window: int | None = None,
    query_offset: int = 0,
    device: torch.device | None = None,
) -> Tensor | None:
    """The one place masks are converted: returns SDPA's boolean mask (True = may attend), or None for "all".

    key_pad_mask: (B, key_len), True = padding. Query i sits at absolute position query_offset + i, key j at j.
    causal: query i sees keys j <= i (§3.2.3). window r: |i - j| <= r (Table 1's restricted self-attention).
    Shape: broadcastable to (B, H, query_len, key_len).
    """
    allowed = None
    if causal or window is not None:
        q = torch.arange(query_offset, query_offset + query_len, device=device).unsqueeze(1)  # (Lq, 1)
        k = torch.arange(key_len, device=device).unsqueeze(0)  # (1, Lk)
        allowed = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
        if causal:
            allowed = allowed & (k <= q)
        if window is not None:
            allowed = allowed & ((q - k).abs() <= window)
        allowed = allowed[None, None]  # (1, 1, Lq, Lk)
    if key_pad_mask is not None:
        keep = ~key_pad_mask[:, None, None, :]  # (B, 1, 1, Lk)
        allowed = keep if allowed is None else allowed & keep
        if window is not None and query_len == key_len and query_offset == 0:
            # A padded query far from every real key would have an empty softmax row (NaN): let it see itself.
            allowed = allowed | torch.eye(query_len, dtype=torch.bool, device=device)
    return allowed


# §3.2.1-§3.2.2 Scaled dot-product and multi-head attention -------------------------------------------------------
class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (§3.2.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (Eq. 1), computed by torch's scaled_dot_product_attention.
    Self-attention projects Q, K and V with one (D -> 3D) product (`project_qkv`), encoder-decoder attention K and V
    with one (D -> 2D) product (`project_kv`); the weights stay three separate D x D projections (W^Q, W^K, W^V),
    concatenated on the fly. Callers can cache K and V (decoder self-attention) or compute them once
    (encoder-decoder attention) and pass them to `attend`.
    """

    def __init__(self, *, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.d_k, self.dropout = n_heads, d_model // n_heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.keep_weights = False  # set by Transformer.recording_attention()
        self.weights: Tensor | None = None  # (B, H, Lq, Lk) when keep_weights
        self.linear: Callable[..., Tensor] = F.linear  # the projections' product (cpu_speed.apply may swap it)

    @staticmethod
    def joined(*linears: nn.Linear) -> tuple[Tensor, Tensor]:
        """Several D x D projections as one: weights (n D, D) and biases (n D,), one after the other."""
        if len(linears) == 1:
            return linears[0].weight, linears[0].bias
        return torch.cat([m.weight for m in linears]), torch.cat([m.bias for m in linears])

    def _project(
        self, x: Tensor, *linears: nn.Linear, joined: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, ...]:
        """x (B, L, D) through several D x D projections in one matrix product -> one (B, H, L, K) per projection.
        `joined`: the projections already joined (a decoding step takes them from its DecoderCache)."""
        weight, bias = self.joined(*linears) if joined is None else joined  # (n D, D), (n D,)
        batch, length, _ = x.shape
        out = self.linear(x, weight, bias).view(batch, length, len(linears), self.n_heads, self.d_k)
        return out.permute(2, 0, 3, 1, 4).unbind(0)  # n x (B, H, L, K)

    def project_qkv(self, x: Tensor, joined: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self._project(x, self.q_proj, self.k_proj, self.v_proj, joined=joined)
        return q, k, v

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self._project(x, self.k_proj, self.v_proj)
        return k, v

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, causal: bool = False) -> Tensor:
        """Queries from x (B, Lq, D); keys and values already projected (B, H, Lk, K)."""
        return self.attend(self._project(x, self.q_proj)[0], k, v, mask, causal=causal)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, causal: bool = False) -> Tensor:
        """Eq. 1 per head on projected q (B, H, Lq, K), k and v (B, H, Lk, K), then Concat(heads) W^O -> (B, Lq, D)."""
        if self.keep_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, Lq, Lk)
            if causal:
                mask = attention_mask(None, query_len=q.size(2), key_len=k.size(2), causal=True, device=q.device)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            self.weights = scores.softmax(dim=-1)
            out = self.weights @ v  # (B, H, Lq, K)
        else:
            p = self.dropout if self.training else 0.0
            if q.dtype == torch.bfloat16 and q.device.type == "cpu":
                # CPU bfloat16 training (train.precision): torch's bfloat16 attention kernels on CPU are slower
                # than its float32 ones (forward + backward 2x at Multi30k shapes), so Eq. 1 itself runs in float32
                with torch.autocast("cpu", enabled=False):
                    out = F.scaled_dot_product_attention(
                        q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=p, is_causal=causal
                    ).to(q.dtype)  # a model cast to bfloat16 (no autocast) keeps its dtype
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_k)  # (B, Lq, D)
        return self.out_proj(out)


# §3.3 Position-wise feed-forward network ---------------------------------------------------------------------------
class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (Eq. 2), or with `activation` swish (x sigmoid(x), Marian's) or gelu.
    `activation_dropout` (not in the paper; fairseq's): dropout on the activation's output, off by default."""

    def __init__(self, *, d_model: int, d_ff: int, activation_dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(activation_dropout) if activation_dropout > 0 else None
        functions: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "swish": F.silu, "gelu": F.gelu}
        self.activation = functions[activation]

    @classmethod
    def of(cls, c: ModelConfig) -> FeedForward:
        return cls(d_model=c.d_model, d_ff=c.d_ff, activation_dropout=c.activation_dropout, activation=c.activation)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.linear1(x))
        return self.linear2(self.dropout(hidden) if self.dropout is not None else hidden)


class SublayerConnection(nn.Module):
    """§3.1 and §5.4: LayerNorm(x + Dropout(Sublayer(x))) (post-LN, the paper's).

    Pre-LN (`norm_first`): x + Dropout(Sublayer(LN(x)))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)  # §5.4 residual dropout (cpu_speed.py has a faster CPU one)
        self.norm_first = config.norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


# §3.1 Encoder and decoder stacks -----------------------------------------------------------------------------------
class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model=config.d_model, n_heads=config.n_heads, dropout=config.attention_dropout
        )
        self.ff = FeedForward.of(config)
        self.sublayer1, self.sublayer2 = SublayerConnection(config), SublayerConnection(config)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.sublayer1(x, lambda h: self.self_attn.attend(*self.self_attn.project_qkv(h), mask))
        return self.sublayer2(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()

        def attention() -> MultiHeadAttention:
            return MultiHeadAttention(d_model=config.d_model, n_heads=config.n_heads, dropout=config.attention_dropout)

        self.self_attn, self.cross_attn = attention(), attention()
        self.ff = FeedForward.of(config)
        self.sublayer1, self.sublayer2, self.sublayer3 = (SublayerConnection(config) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        self_mask: Tensor | None,
        cross_mask: Tensor | None,
        *,
        causal: bool = False,
        cache: DecoderCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        def self_attention(h: Tensor) -> Tensor:
            joined = None if cache is None else cache.qkv_weights[layer]  # joined once per decoding
            q, k, v = self.self_attn.project_qkv(h, joined)  # (B, H, T, K)
            if cache is not None:  # append this step's keys/values to the ones of earlier steps
                past = cache.self_kv[layer]
                if past is not None:
                    k = torch.cat([past[0], k], dim=2)  # (B, H, t+1, K)
                    v = torch.cat([past[1], v], dim=2)
                cache.self_kv[layer] = (k, v)
            return self.self_attn.attend(q, k, v, self_mask, causal=causal)

        def cross_attention(h: Tensor) -> Tensor:
            # §3.2.3: queries from the decoder, keys and values from the encoder output. A sentence's beam rows
            # share its keys and values (DecoderCache.expand): their queries go in as one row of `beams` positions.
            beams = 1 if cache is None else cache.beams
            if beams == 1:
                return self.cross_attn(h, *memory_kv, cross_mask)
            rows, length, width = h.shape  # (N, 1, D) -> (B, beams, D) -> (N, 1, D)
            return self.cross_attn(h.reshape(rows // beams, beams * length, width), *memory_kv, cross_mask).view(
                rows, length, width
            )

        x = self.sublayer1(x, self_attention)
        x = self.sublayer2(x, cross_attention)
        return self.sublayer3(x, self.ff)


class Embedding(nn.Module):
    """§3.4-§3.5: Dropout(token embedding * sqrt(d_model) + positional encoding), the encoding sinusoidal or learned
    (model.positional); `scale_embeddings` false multiplies by 1 instead (a Marian option)."""

    pe: Tensor  # the sinusoidal table (max_len, D), a buffer, when the positions are sinusoidal

    def __init__(self, config: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.tokens, self.scale = tokens, math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        if config.positional == "learned":
            self.learned = nn.Embedding(config.max_len, config.d_model)
        else:
            self.register_buffer("pe", sinusoidal_encoding(config.max_len, config.d_model), persistent=False)
        self.dropout = nn.Dropout(config.dropout)
        self.max_len = config.max_len

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        length = tokens.size(1)
        if offset + length > self.max_len:
            raise ValueError(f"sequence of length {offset + length} exceeds model.max_len={self.max_len}")
        if hasattr(self, "learned"):
            positions = self.learned.weight[offset : offset + length]  # (L, D)
        else:
            positions = self.pe[offset : offset + length]  # (L, D)
        return self.dropout(self.tokens(tokens) * self.scale + positions)  # (B, L, D)


class Encoder(nn.Module):
    """Embedding + N layers of (self-attention, FFN) [+ final LayerNorm for pre-LN]. Shared with the classifier."""

    def __init__(self, config: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.embed = Embedding(config, tokens)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.window = config.attention_window

    def forward(self, src: Tensor, src_pad_mask: Tensor) -> Tensor:
        x = self.embed(src)  # (B, S, D)
        mask = attention_mask(
            src_pad_mask, query_len=src.size(1), key_len=src.size(1), window=self.window, device=src.device
        )  # (B, 1, S, S) or (B, 1, 1, S)
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x) if self.final_norm is not None else x  # (B, S, D)


class Decoder(nn.Module):
    """Embedding + N layers of (masked self-attention, encoder-decoder attention, FFN) [+ final LayerNorm]."""

    def __init__(self, config: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.embed = Embedding(config, tokens)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.window = config.attention_window
        self.pad_id = config.pad_id

    def forward(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_pad_mask: Tensor,
        extra: Tensor | None = None,
        *,
        full_context: bool = False,
    ) -> Tensor:
        """`extra` (B, T, D), optional: added to the embedded inputs (an input a subclass adds). `full_context`:
        no future mask, every position sees the whole target (alignment's pass, model/alignment.py; never a
        prediction's)."""
        x = self.embed(tgt_in)  # (B, T, D)
        if extra is not None:
            x = x + extra
        length = tgt_in.size(1)
        causal = self.window is None and not full_context  # the fused causal kernel; a window needs a mask
        self_mask = None
        if full_context:  # the whole target but its padding (a Marian model's BOS, its pad row, stays seen)
            padding = tgt_in.eq(self.pad_id)
            padding[:, 0] = False
            self_mask = attention_mask(padding, query_len=length, key_len=length, window=self.window, device=x.device)
        elif not causal:
            self_mask = attention_mask(
                None, query_len=length, key_len=length, causal=True, window=self.window, device=x.device
            )
        cross_mask = attention_mask(src_pad_mask, query_len=length, key_len=memory.size(1))  # (B, 1, 1, S)
        for layer in self.layers:
            memory_kv = cast(DecoderLayer, layer).cross_attn.project_kv(memory)
            x = layer(x, memory_kv, self_mask, cross_mask, causal=causal)
        return self.final_norm(x) if self.final_norm is not None else x  # (B, T, D)

    def step(self, tokens: Tensor, cache: DecoderCache, extra: Tensor | None = None) -> Tensor:
        x = self.embed(tokens.view(-1, 1), offset=cache.step)  # (B, 1, D)
        if extra is not None:
            x = x + extra.view(x.shape)
        self_mask = None
        if self.window is not None:  # the newest position sees only the last r+1 positions
            self_mask = attention_mask(
                None, query_len=1, key_len=cache.step + 1, window=self.window, query_offset=cache.step, device=x.device
            )
        for i, layer in enumerate(self.layers):
            x = layer(x, cache.memory_kv[i], self_mask, cache.cross_mask, cache=cache, layer=i)
        cache.step += 1
        x = self.final_norm(x) if self.final_norm is not None else x
        return x[:, 0]  # (B, D)


def init_parameters(root: nn.Module, d_model: int) -> None:
    """Xavier-uniform projections and zero biases (as fairseq and the Annotated Transformer); embeddings
    N(0, d_model^-0.5) so that embedding * sqrt(d_model) has unit scale; padding row zero."""
    for module in root.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=d_model**-0.5)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()


class Transformer(nn.Module):
    """Encoder-decoder Transformer. `forward(src, tgt_in) -> logits (B, T, V)`.

    src, tgt_in: (B, S), (B, T) token ids padded with config.pad_id; tgt_in starts with BOS (teacher forcing).
    For decoding: `memory = encode(src)`, `cache = start_decoding(memory, src_pad_mask)`, then
    `decode_step(last_tokens, cache) -> logits (B, V)` once per output position; beam search first calls
    `cache.expand(beams)`, then `cache.reorder(index)` and `cache.select(index)` as its beams move.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.vocab_size <= 0:
            raise ConfigError("model.vocab_size is not set (it normally comes from the tokenizer)")
        check_fits(model_shape(config))  # a run's config.json may ask for more than the machine has: refused first
        self.config = config
        src_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        # §3.4: with a shared vocabulary, one matrix for both embeddings and the pre-softmax projection.
        tgt_tokens = (
            src_tokens
            if config.tie_embeddings
            else nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        )
        self.encoder = Encoder(config, src_tokens)
        self.decoder = Decoder(config, tgt_tokens)
        # the pre-softmax projection (a bias only with model.output_bias): cpu_speed.apply may make it a WorkspaceLinear
        self.output: nn.Module = nn.Linear(config.d_model, config.vocab_size, bias=config.output_bias)
        self.add_modules()
        init_parameters(self, config.d_model)
        if config.tie_embeddings:
            self.output.weight = tgt_tokens.weight
        if config.alignment_head:  # made last, on a fork of the generator: one seed gives the same translation
            with torch.random.fork_rng(devices=[]):  # weights, and later the same dropout masks, with or without it
                self.alignment_head = AlignmentHead(config)

    def add_modules(self) -> None:
        """Where a subclass adds modules of its own: after the Transformer's and before the
        parameters are initialised, so that one seed gives one model whatever the subclass."""

    def pad_mask(self, tokens: Tensor) -> Tensor:
        return tokens.eq(self.config.pad_id)  # (B, L), True = padding

    def encode(self, src: Tensor) -> Tensor:
        return self.encoder(src, self.pad_mask(src))  # (B, S, D)

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor, positions: Tensor | None = None) -> Tensor:
        """Teacher-forced logits (B, T, V) of the decoder inputs `tgt_in` over the encoder output `memory`; given
        `positions` (flat indices into B*T), logits (len(positions), V) for those positions only (training skips the
        pre-softmax projection of padding)."""
        return self.logits(self.decoder(tgt_in, memory, src_pad_mask), positions)

    def logits(self, h: Tensor, positions: Tensor | None = None) -> Tensor:
        """The pre-softmax projection (§3.4) of decoder states h (B, T, D), at `positions` only if given."""
        if positions is not None:
            h = h.reshape(-1, h.size(-1)).index_select(0, positions)  # (N, D)
        return self.output(h)  # (B, T, V) or (N, V)

    def forward(self, src: Tensor, tgt_in: Tensor, positions: Tensor | None = None) -> Tensor:
        """Logits (B, T, V), or (len(positions), V) given `positions` (see decode)."""
        return self.decode(tgt_in, self.encode(src), self.pad_mask(src), positions)

    def start_decoding(self, memory: Tensor, src_pad_mask: Tensor) -> DecoderCache:
        """Encoder-decoder keys/values are computed here, once per batch; the self-attention's Q/K/V projections
        are joined here once, not at every step."""
        layers = [cast(DecoderLayer, layer) for layer in self.decoder.layers]
        memory_kv = [layer.cross_attn.project_kv(memory) for layer in layers]
        cross_mask = attention_mask(src_pad_mask, query_len=1, key_len=memory.size(1))
        return DecoderCache(
            qkv_weights=[
                MultiHeadAttention.joined(m.q_proj, m.k_proj, m.v_proj) for m in (x.self_attn for x in layers)
            ],
            memory_kv=memory_kv,
            self_kv=[None] * len(memory_kv),
            src_pad_mask=src_pad_mask,
            cross_mask=cross_mask,
        )

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """tokens: (B,) the newest token of each row. Returns next-token logits (B, V); updates `cache`."""
        return self.output(self.decoder.step(tokens, cache))

    @contextlib.contextmanager
    def recording_attention(self):
        """Within this block every attention module keeps its weights (B, H, Lq, Lk) in `.weights`."""
        modules = [m for m in self.modules() if isinstance(m, MultiHeadAttention)]
        for m in modules:
            m.keep_weights = True
        try:
            yield
        finally:
            for m in modules:
                m.keep_weights = False

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # shared (tied) tensors are counted once
