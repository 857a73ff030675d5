"""``python -m isolde``: the isolde command line (REPL, scripts, -e)."""

import sys

from isolde.repl.cli import main

if __name__ == "__main__":
    sys.exit(main())
