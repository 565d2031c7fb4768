"""The `datakit` command line: one module per command group, registered on the `main` group here.

Exit codes: 0 ok, 1 a step failed, 2 bad input (manifest, arguments), 3 another ferry holds the
ferry lock (`datakit ferry run`), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import click

from datakit import __version__
from datakit.core import fork_safety
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

def entry() -> None:
    """The `datakit` command as a process of its own (the console script, `python -m datakit.cli`): the
    process is datakit's from its first line, so the local backend may fork its workers' zygote from
    it (`core.fork_safety`). Tests that call `main` in their own process keep fresh zygotes."""
    fork_safety.claim_process()
    main()


__all__ = ["entry", "main", "state_word"]
