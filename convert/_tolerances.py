"""The parity check's default tolerances, in a module of their own: the API, the CLI and the check
read them from here, and neither starting the CLI nor a conversion without the check imports the
check (numpy and the runtimes' modules) for three numbers."""

from __future__ import annotations

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "DEFAULT_TOL"]

DEFAULT_ATOL = 1e-4  # numpy's elementwise rule |ours - ref| <= atol + rtol * |ref|, reported beside the verdict
DEFAULT_RTOL = 1e-3
DEFAULT_TOL = 1e-4  # the verdict: max|ours - ref| / max|ref| per output
