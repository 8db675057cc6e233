"""The Transformer (transformer.py, in the paper's order; its decoding cache, cache.py), the parser's with the
word pointer (pointer.py), the classifier (classifier.py) and the trainer's CPU speed measures (cpu_speed.py)."""

from .pointer import PointerTransformer
from .transformer import Encoder, Transformer, init_parameters, sinusoidal_encoding

__all__ = ["Encoder", "PointerTransformer", "Transformer", "init_parameters", "sinusoidal_encoding"]
