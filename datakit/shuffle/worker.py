"""Entry point of a local worker process: `python -m datakit.shuffle.worker FD`."""

import sys
from multiprocessing.connection import Connection

from .backends import _worker_main

if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1])))
