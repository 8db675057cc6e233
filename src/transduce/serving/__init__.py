"""Serving a trained model over HTTP: the service (service.py: limits, loading a run) with its dynamic batching
(batcher.py), the HTTP layer (app.py: FastAPI routes, messages.py: the JSON bodies), LibreTranslate's API
(libretranslate.py), several language pairs in one server (pairs.py), API keys and CORS (access.py), and a
page for people.

Needs the optional `serve` dependencies (fastapi, uvicorn; py3langid for LibreTranslate's language detection).
"""

from .app import create_app, create_pairs_app, run_server, serve
from .batcher import DynamicBatcher
from .service import Limits, load_predictor

__all__ = ["DynamicBatcher", "Limits", "create_app", "create_pairs_app", "load_predictor", "run_server", "serve"]
