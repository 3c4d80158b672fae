"""`python -m reconciler --help`"""
from __future__ import annotations

import sys

from reconciler import options
from reconciler.commands import COMMANDS
from reconciler.commands import main as commands_main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:        # python -m reconciler plan|restore ...
        return commands_main(argv)
    settings = options.parse(argv)
    from reconciler.run import main as run   # heavy imports only after --help/parse errors
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
