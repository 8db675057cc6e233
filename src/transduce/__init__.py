"""transduce: the Transformer of "Attention Is All You Need", from raw parallel text to sacreBLEU."""

from .config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from .model import Transformer

__all__ = ["Config", "DataConfig", "DecodeConfig", "ModelConfig", "TrainConfig", "Transformer"]
__version__ = "0.1.0"
