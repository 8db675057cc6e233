"""The one error of the config layer: a setting the user wrote that cannot be used."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration the user wrote cannot be used; the message says which key and why."""
