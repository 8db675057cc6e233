"""Deployment: export a trained model to another inference engine (CTranslate2) and translate with it, or to a
Hugging Face Transformers folder (huggingface.py; `from transduce.export.huggingface import export_huggingface`)."""

from .ctranslate2 import (
    CTranslate2Translator,
    ExportError,
    export_ctranslate2,
    is_export,
)

__all__ = ["CTranslate2Translator", "ExportError", "export_ctranslate2", "is_export"]
