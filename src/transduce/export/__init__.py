"""Deployment: export a trained model to another inference engine (CTranslate2) and translate with it, or to a
Hugging Face Transformers folder (huggingface.py; transformers is imported only when an export runs)."""

from .ct2_translator import CTranslate2Translator
from .ctranslate2 import ExportError, export_ctranslate2, is_export
from .huggingface import export_huggingface

__all__ = ["CTranslate2Translator", "ExportError", "export_ctranslate2", "export_huggingface", "is_export"]
