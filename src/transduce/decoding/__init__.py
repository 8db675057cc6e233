"""Decoding helpers: constraints that restrict what a search may produce."""
