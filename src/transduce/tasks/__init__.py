"""Tasks built on the shared trainer: translation, classification, constituency parsing."""
