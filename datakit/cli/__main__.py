"""`python -m datakit.cli`: the `datakit` command (the cron line and the tests run it this way)."""

import sys

from datakit.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
