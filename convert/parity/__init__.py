"""Parity check: run the source model in its own runtime and the converted one, compare."""

from __future__ import annotations
