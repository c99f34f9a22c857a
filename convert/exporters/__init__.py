"""Exporters: one package per destination format, each exposing EXPORTER (see convert.ir.plugins)."""
