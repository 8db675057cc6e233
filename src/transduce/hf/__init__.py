"""Hugging Face interop: `layout.py` maps our Transformer's weights onto transformers' MarianMTModel (post-LN) and
PegasusForConditionalGeneration (pre-LN) and back, without importing transformers."""

from .layout import LayoutError, from_marian, model_class, to_marian, width_permutation

__all__ = ["LayoutError", "from_marian", "model_class", "to_marian", "width_permutation"]
