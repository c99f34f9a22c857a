"""``python -m convert`` runs the same CLI as the ``convert`` command."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
