"""Deployment: export a trained model to another inference engine (CTranslate2) and translate with it."""

from .ctranslate2 import (
    CTranslate2Translator,
    ExportError,
    export_ctranslate2,
    is_export,
)

__all__ = ["CTranslate2Translator", "ExportError", "export_ctranslate2", "is_export"]
