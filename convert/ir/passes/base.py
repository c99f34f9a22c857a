"""Pass infrastructure: ``Pass.run(model) -> PassResult(modified)`` and a ``PassManager``.

The manager logs each pass and re-raises any failure as ``PassError`` naming the pass and the
passes that ran before it. With ``validate=True`` (tests, ``--debug``) it runs the validator
after every pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import onnx_ir as _ir

from ..driver import InternalError
from ..errors import ConvertError, PassError

__all__ = ["Pass", "PassManager", "PassResult"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassResult:
    """What a pass did: the model (passes edit in place) and whether it changed anything."""

    model: _ir.Model
    modified: bool


class Pass:
    """Base class of every pass; subclasses implement ``call``."""

    name: str = ""

    def __call__(self, model: _ir.Model) -> PassResult:
        return self.call(model)

    def call(self, model: _ir.Model) -> PassResult:
        """Run the pass on ``model`` in place."""
        raise NotImplementedError

    @property
    def pass_name(self) -> str:
        """The pass's display name (class name unless ``name`` is set)."""
        return self.name or type(self).__name__


class PassManager:
    """Run passes in order, optionally validating after each one."""

    def __init__(self, passes: Sequence[Pass], *, validate: bool = False) -> None:
        self.passes = list(passes)
        self.validate = validate

    def __call__(self, model: _ir.Model) -> PassResult:
        from .validate import ValidateGraph

        modified = False
        ran: list[str] = []
        for p in self.passes:
            start = time.perf_counter()
            try:
                result = p(model)
                if self.validate and not isinstance(p, ValidateGraph):
                    ValidateGraph()(model)
            except PassError:
                raise
            except ConvertError as exc:
                raise PassError(p.pass_name, ran, str(exc)) from exc
            except Exception as exc:  # a bug in the pass, not the user's model: an internal error (exit 3)
                raise InternalError(f"pass '{p.pass_name}' (after: {', '.join(ran) or 'none'})", exc) from exc
            logger.debug("pass %s: modified=%s (%.3f s)", p.pass_name, result.modified,
                         time.perf_counter() - start)
            modified |= result.modified
            ran.append(p.pass_name)
        return PassResult(model, modified)
