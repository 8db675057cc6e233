"""The Transformer (transformer.py, in the paper's order) and the trainer's CPU speed measures (cpu_speed.py)."""

from .transformer import Encoder, Transformer, init_parameters, sinusoidal_encoding

__all__ = ["Encoder", "Transformer", "init_parameters", "sinusoidal_encoding"]
