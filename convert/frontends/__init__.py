"""Frontends: one package per source format, each exposing FRONTEND (see convert.ir.plugins)."""
