"""The model card (README.md) of a Hugging Face export: what the run was trained on, how, and what its run directory
recorded (metrics.jsonl's validations, best.json, data/summary.json), with how to load and run the model. An Argos
package's card (export/argos.py) ends with the same record (`run_record`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..config import Config
from ..hf.layout import PEGASUS


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _records(run_dir: Path) -> list[dict]:
    """metrics.jsonl's records (a torn last line, from a kill during the write, is skipped)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def model_card(run_dir: Path, config: Config, *, weights: Path, hf_class: str, model) -> str:
    """The README.md of the export folder."""
    src, tgt = config.data.src, config.data.tgt
    parts = [
        _front_matter(config, hf_class),
        f"# {src} → {tgt} translation: a Transformer trained with transduce\n",
        _overview(config, hf_class, model),
        _usage(config, hf_class),
        _data_section(run_dir, config),
        _figures(run_dir, weights),
        _recipe(config),
    ]
    return "\n".join(part for part in parts if part)


def run_record(run_dir: Path, config: Config, *, weights: Path) -> str:
    """The sections every export's card ends with: the data, what the run recorded, the recipe (export/argos.py)."""
    return "\n".join([_data_section(run_dir, config), _figures(run_dir, weights), _recipe(config)])


def _front_matter(config: Config, hf_class: str) -> str:
    languages = [x for x in dict.fromkeys([config.data.src, config.data.tgt]) if x]
    tags = ["translation", "transduce", "pegasus" if hf_class == PEGASUS else "marian"]
    lines = ["---", "language:", *[f"- {x}" for x in languages], "library_name: transformers"]
    lines += ["pipeline_tag: translation", "tags:", *[f"- {t}" for t in tags], "---", ""]
    return "\n".join(lines)


def _overview(config: Config, hf_class: str, model) -> str:
    m = config.model
    layout = "pre-LN (a LayerNorm before each sub-layer, one after each stack)" if m.norm_first else "post-LN"
    tied = "tied (one matrix for both embeddings and the output)" if m.tie_embeddings else "untied"
    return (
        f'The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), {layout}, trained with '
        f"transduce and exported as a `{hf_class}`: {m.encoder_layers} encoder and "
        f"{m.decoder_layers} decoder layers, d_model {m.d_model}, d_ff {m.d_ff}, {m.n_heads} heads, ReLU, sinusoidal "
        f"positions, embeddings {tied}, {model.num_parameters():,} parameters, a shared SentencePiece vocabulary of "
        f"{m.vocab_size} pieces (`source.spm` and `target.spm` are the same model). The exported network computes "
        "transduce's logits (float32, to rounding): transduce interleaves the sines and cosines of its position "
        "table, this class puts all sines first, and the export reorders the model width to match.\n"
    )


def _usage(config: Config, hf_class: str) -> str:
    d = config.decode
    penalty = {
        "length": f"`length_penalty={d.alpha:g}`: log P / |Y|^{d.alpha:g}, |Y| counting EOS, the run's own penalty",
        "none": "`length_penalty=0`: the run's own (none)",
        "gnmt": (
            f"`length_penalty={d.alpha:g}`: log P / |Y|^{d.alpha:g}, |Y| counting EOS; the run decodes with the "
            f"GNMT penalty ((5 + |Y|) / 6)^{d.alpha:g}, which `generate` does not have"
        ),
    }[d.length_penalty]
    stop = (
        "a sentence ends once beam hypotheses have finished (`early_stopping=True`: the run's decode.patience 1)"
        if d.patience == 1
        else 'a sentence ends when no unfinished hypothesis can beat its finished ones (`early_stopping="never"`, '
        "transduce's exact stop)"
    )
    n = 'batch["input_ids"].shape[1]'  # the longest source's pieces + EOS
    longest = f"{n} + {d.max_len_b}" if d.max_len_a == 1 else f"1 + int({d.max_len_a:g} * ({n} - 1) + {d.max_len_b})"
    return f"""## Use

```python
from transformers import AutoTokenizer, {hf_class}

tokenizer = AutoTokenizer.from_pretrained("PATH")  # a MarianTokenizer
model = {hf_class}.from_pretrained("PATH")
batch = tokenizer(["A sentence to translate."], return_tensors="pt", padding=True, truncation=True)
out = model.generate(**batch, max_length={longest})
print(tokenizer.batch_decode(out, skip_special_tokens=True))
```

`generation_config.json` holds the run's decoding settings:
- beam {d.beam};
- {penalty};
- PAD and BOS are never produced (`suppress_tokens`);
- {stop};
- `max_length` {config.model.max_len}, the model's positions. transduce allows {d.max_len_a:g} x |source| +
  {d.max_len_b} output tokens (EOS included) per sentence; `generate` takes one maximum per call (`max_length`
  counts the decoder's start token, as in the example above).

Token ids are transduce's (PAD 0, UNK 1, BOS 2, EOS 3); decoding starts from BOS (`decoder_start_token_id`).
Sources longer than {config.model.max_len - 2} pieces need `truncation=True` (transduce cuts them there too).
"""


def _data_section(run_dir: Path, config: Config) -> str:
    data = config.data
    lines = ["## Data", ""]
    lines.append(f"Source language `{data.src}`, target `{data.tgt}`.")
    for name, prefix in (("training", data.train), ("validation", data.valid)):
        if prefix:
            lines.append(f"- {name}: `{prefix}.{data.src}`, `{prefix}.{data.tgt}`")
    for prefix in data.test:
        lines.append(f"- test: `{prefix}.{data.src}`, `{prefix}.{data.tgt}`")
    if data.prepared:
        lines.append(f"- prepared data: `{data.prepared}`")
    summary = _read_json(run_dir / "data" / "summary.json")
    splits = summary.get("splits", {}) if isinstance(summary, dict) else {}
    if splits:
        lines += [
            "",
            "| split | sentences | source tokens | target tokens | dropped |",
            "| --- | --- | --- | --- | --- |",
        ]
        for split, s in splits.items():
            dropped = sum((s.get("dropped") or {}).values()) if isinstance(s.get("dropped"), dict) else ""
            row = [split, s.get("sentences", ""), s.get("src_tokens", ""), s.get("tgt_tokens", ""), dropped]
            lines.append("| " + " | ".join(_number(x) for x in row) + " |")
    vocabulary = f"SentencePiece {data.model_type}, {config.model.vocab_size} pieces shared by both languages"
    lines += ["", f"Vocabulary: {vocabulary}{', digits split' if data.split_digits else ''}.", ""]
    return "\n".join(lines)


def _figures(run_dir: Path, weights: Path) -> str:
    records = _records(run_dir)
    valid = [r for r in records if r.get("kind") == "valid"]
    train = [r for r in records if r.get("kind") == "train"]
    lines = ["## What the run recorded", ""]
    lines.append(f"Exported weights: `{weights.relative_to(run_dir) if weights.is_relative_to(run_dir) else weights}`.")
    best = _read_json(run_dir / "best.json")
    if isinstance(best, dict) and best:
        lines.append("Best validation (best.json): " + ", ".join(f"{k} {_number(v)}" for k, v in best.items()) + ".")
    if train:
        last = train[-1]
        figures = [f"{k} {_number(last[k])}" for k in ("step", "epoch", "loss", "ppl", "elapsed") if k in last]
        lines.append("Last training log line (metrics.jsonl): " + ", ".join(figures) + " (elapsed: seconds).")
    if valid:
        keys = [k for k in ("valid_loss", "valid_ppl", "valid_bleu", "valid_chrf") if any(k in r for r in valid)]
        lines += ["", "| step | " + " | ".join(k.removeprefix("valid_") for k in keys) + " |"]
        lines.append("| --- |" + " --- |" * len(keys))
        for r in valid[-20:]:
            lines.append(f"| {r.get('step', '')} | " + " | ".join(_number(r.get(k, "")) for k in keys) + " |")
        if len(valid) > 20:
            lines.append(f"\n(the last 20 of {len(valid)} validations; all are in the run's metrics.jsonl)")
    if not records:
        lines.append("The run directory holds no metrics.jsonl.")
    lines.append("")
    return "\n".join(lines)


def _recipe(config: Config) -> str:
    sections = {name: dataclasses.asdict(getattr(config, name)) for name in ("model", "data", "train", "decode")}
    body = json.dumps(sections, indent=2)
    return f"## Recipe\n\nThe run's settings (its config.json):\n\n```json\n{body}\n```\n"
