"""The `datakit` command line: one module per command group, registered on the `main` group here.

Exit codes: 0 ok, 1 a step failed, 2 bad input (manifest, arguments), 3 another ferry holds the
ferry lock (`datakit ferry run`), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import click

from datakit import __version__
from datakit.defaults import default_manifest_path

from . import cache, demo, explain, export, ferry, mix, report, run, steps
from .steps import state_word


_HELP = f"""datakit: manifest-driven pretraining data pipelines (fetch, normalize, dedup, tokenize, train).

Without a MANIFEST, commands use the embedded default manifest, a small real corpus, writing to
./datakit-out: {default_manifest_path()}"""


@click.group(help=_HELP)
@click.version_option(__version__, prog_name="datakit")
def main() -> None:
    """The `datakit` command group (its help is _HELP, which names the default manifest's path)."""


for _command in (run.validate, run.run, steps.verify, steps.status, steps.gc, report.report, cache.cache,
                 demo.demo, ferry.ferry, mix.mix, export.export, explain.explain):
    main.add_command(_command)

__all__ = ["main", "state_word"]
