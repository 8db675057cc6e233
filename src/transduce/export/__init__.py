"""Deployment: export a trained model to another inference engine (CTranslate2) and translate with it, to a
Hugging Face Transformers folder (huggingface.py; transformers is imported only when an export runs), or to an Argos
Translate package (argos.py: the CTranslate2 export in the zip that Argos Translate and LibreTranslate install)."""

from .argos import export_argos
from .ct2_translator import CTranslate2Translator
from .ctranslate2 import ExportError, export_ctranslate2, is_export
from .huggingface import export_huggingface

__all__ = [
    "CTranslate2Translator",
    "ExportError",
    "export_argos",
    "export_ctranslate2",
    "export_huggingface",
    "is_export",
]
