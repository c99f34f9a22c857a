"""Parity runtimes: one module per format, each exposing open_runtime(paths, options)."""
