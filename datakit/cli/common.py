"""What every command shares: the exit codes, loading a manifest (its errors printed, exit 2), the
output prefix a command works on, and one line for a disk that refuses a write."""

from __future__ import annotations

import os
import sys

import click

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LOCKED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130  # as datakit.ferry.run's
# (named here, not imported from the ferry, so that every command does not pay for importing it)


def default_manifest() -> str:
    """The embedded default: a real small corpus every Python machine has (see datakit/ferry/)."""
    from datakit.defaults import default_manifest_path

    return default_manifest_path()


def load(manifest_path: str | None, *, check_uris: bool = True):
    from datakit.manifest import ManifestInvalid
    from datakit.pipeline import load_manifest

    path = manifest_path or default_manifest()
    try:
        return load_manifest(path, check_uris=check_uris)
    except ManifestInvalid as e:
        for err in e.errors:
            click.echo(str(err), err=True)
        click.echo(f"{len(e.errors)} error(s) in {path}; nothing was run.", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except FileNotFoundError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def resolve_prefix(m, prefix: str | None, manifest_given: bool = True) -> str:
    """--prefix, else the manifest's prefix; the embedded default writes to ./datakit-out."""
    if prefix:
        return prefix
    from datakit.defaults import DEFAULT_PREFIX

    return m.prefix if manifest_given else os.path.abspath(DEFAULT_PREFIX)


def exit_on_disk_error(e: BaseException, path: str, remedy: str | None = None, doing: str = "write") -> None:
    """A disk that refuses (read-only, no permission, full): one line naming ``path`` and ``remedy``, exit 2,
    instead of a traceback; without a remedy, the run's own sentence for its output prefix (what to free
    or which --prefix to choose). Returns for any other error (the caller re-raises)."""
    from datakit.core.fsio import PrefixNotWritable, disk_problem

    problem = e.problem if isinstance(e, PrefixNotWritable) else disk_problem(e)
    if problem is None:
        return
    if remedy is None:
        click.echo(f"error: {problem.message(path)}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    what = "no space left on device" if problem.no_space else os.strerror(problem.code).lower()
    click.echo(f"error: cannot {doing} {path}: {what}; {remedy}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def require_writable(path: str, remedy: str) -> None:
    """One line and exit 2, before any work, when ``path`` (created if missing) cannot be written: a
    read-only or full output dir costs one line, not retried tasks and a traceback."""
    from datakit.core.fsio import PrefixNotWritable, check_writable, store_url

    try:
        check_writable(store_url(path))
    except (OSError, PrefixNotWritable) as e:
        exit_on_disk_error(e, path, remedy)
        raise
