"""Serving a trained model over HTTP: FastAPI routes, dynamic batching, and a page for people.

Needs the optional `serve` dependencies (fastapi, uvicorn).
"""

from .app import Limits, create_app, load_predictor, run_server, serve
from .batcher import DynamicBatcher

__all__ = ["DynamicBatcher", "Limits", "create_app", "load_predictor", "run_server", "serve"]
