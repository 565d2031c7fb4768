"""Package namespaces whose public names live in submodules and are imported on first use (PEP 562).

Why: a worker process that only tokenizes, or a `datakit run` that never trains, should not pay for
importing what it does not call (JAX alone costs over a CPU-second per process)."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, homes: dict[str, str], namespace: dict[str, Any]) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``homes`` (name -> submodule) is
    imported from ``package.<submodule>`` when first read, then kept in ``namespace`` (the package's
    globals), so later reads are plain lookups."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
