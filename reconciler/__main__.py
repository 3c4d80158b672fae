"""`python -m reconciler --help`"""

from __future__ import annotations

import sys

from reconciler import options


def main(argv: list[str] | None = None) -> int:
    settings = options.parse(sys.argv[1:] if argv is None else argv)
    from reconciler.run import main as run  # heavy imports only after --help/parse errors

    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
