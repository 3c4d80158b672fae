"""`python -m reconciler --help`"""
from __future__ import annotations

import os
import sys

# We use no pydantic plugins: skip pydantic's scan of every installed distribution's entry
# points at the first model build (a share of the reconciler's startup). An explicit
# setting in the environment wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from reconciler import options  # noqa: E402
from reconciler.commands import COMMANDS  # noqa: E402
from reconciler.commands import main as commands_main  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:        # python -m reconciler plan|restore ...
        return commands_main(argv)
    settings = options.parse(argv)
    from reconciler.run import main as run   # heavy imports only after --help/parse errors
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
