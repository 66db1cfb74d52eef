"""Deprecated: `python3 -m rammer.torch_export ARGS` is `rammer export ARGS` (rammer/export.py); kept one release
so that scripts keep working, with a note saying so."""
from __future__ import annotations

import sys

if __name__ == "__main__":
    from rammer.cli import main
    print("note: `python3 -m rammer.torch_export` is deprecated; use `rammer export`", file=sys.stderr)
    main(["export", *sys.argv[1:]], prog_name="rammer export")
