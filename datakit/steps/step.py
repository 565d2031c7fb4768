"""The Step value, what its function sees at run time, and the order of a DAG of steps (deps first).

A Step is a frozen description (name + function + versioned config + deps). Its identity is derived
from everything except the function object: functions cannot be hashed reliably, so the ``version``
string is the promise "bump me when the implementation changes its output".
"""
from __future__ import annotations

import functools
import logging
import posixpath
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .identity import ConfigError, canonical_config, compute_identity

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # fullmatch: "$" passes a final "\n"


@dataclass(frozen=True, eq=False)
class Step:
    """One node of the DAG.

    name:    path-safe, unique within a run (``normalize-wiki``); the output dir is ``<name>-<identity>``.
    fn:      ``fn(ctx: StepContext) -> dict`` (JSON-serializable; may hold ``"counters": {name: int}``
             and ``"provenance": {...}``). Write outputs under ``ctx.output``; refer to them in the
             result by paths RELATIVE to it, so a mirrored copy stays valid.
    config:  JSON values that determine the output; part of the identity. No machine-local absolute
             paths (rejected): see datakit.steps.identity.
    deps:    Steps whose outputs this one reads (``ctx.deps[name]``).
    version: implementation version; bump it when the code's output changes for the same config.
    resumable: keep a failed attempt's partial output for the next attempt (the stage must validate
             what it reuses); otherwise the step dir is cleared first so partial output is never trusted.
    inputs:  relative file name -> content hash of the local files the step reads (see
             datakit.steps.fingerprint). NOT part of the identity: the caller puts their digest in
             config. Recorded in artifact.json so a dry run can name the files that changed.
    stage:   the stage that built the step (``normalize``); descriptive, recorded, not in the identity.
    source:  the source the step belongs to, if any; descriptive, recorded, not in the identity.
    """

    name: str
    fn: Callable[["StepContext"], dict | None]
    config: dict = field(default_factory=dict)
    deps: tuple["Step", ...] = ()
    version: str = "1"
    # Stages that keep their own fingerprinted progress markers (tokenize shards, training checkpoints)
    # resume from a crashed attempt's partial output instead of starting over; not part of the identity.
    resumable: bool = field(default=False, compare=False)
    inputs: dict[str, str] = field(default_factory=dict, compare=False)
    stage: str = field(default="", compare=False)
    source: str | None = field(default=None, compare=False)
    # Asked before a built step is reused: a reason its output is outdated although its identity is the
    # same (a remote source whose server now answers differently), or None. Treated like a damaged
    # output: the step and everything downstream rebuild. Not part of the identity.
    recheck: Callable[["StepRecord"], str | None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"step name {self.name!r} is not path-safe: use letters, digits, '.', '_', '-' "
                "(not starting with '.' or '-'), at most 100 characters"
            )
        if not callable(self.fn):
            raise TypeError(f"step {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if not isinstance(self.version, str) or not self.version:
            raise TypeError(f"step {self.name!r}: version must be a non-empty str, got {self.version!r}")
        if not isinstance(self.config, dict):
            raise ConfigError(f"step {self.name!r}: config must be a dict, got {type(self.config).__name__}")
        try:
            frozen_config = canonical_config(self.config)
        except ConfigError as e:
            raise ConfigError(f"step {self.name!r}: {e}") from None
        deps = tuple(self.deps) if not isinstance(self.deps, Step) else (self.deps,)
        for d in deps:
            if not isinstance(d, Step):
                raise TypeError(f"step {self.name!r}: deps must be Steps, got {type(d).__name__}")
        names = [d.name for d in deps]
        if len(set(names)) != len(names):
            raise ValueError(f"step {self.name!r}: two deps share a name: {sorted(names)}")
        # A private deep copy: mutating the caller's dict later cannot change a computed identity.
        object.__setattr__(self, "config", frozen_config)
        object.__setattr__(self, "deps", deps)
        object.__setattr__(self, "inputs", _checked_inputs(self.name, self.inputs))
        _check_descriptive(self.name, self.stage, self.source)

    @functools.cached_property
    def identity(self) -> str:
        return compute_identity(self.name, self.config, self.version, [d.identity for d in self.deps])

    @property
    def dirname(self) -> str:
        """``<name>-<identity>``: the step's directory under any prefix or mirror."""
        return f"{self.name}-{self.identity}"

    def __eq__(self, other: object) -> bool:
        # Same identity == same computation (the function object is deliberately not compared).
        return isinstance(other, Step) and (self.name, self.identity) == (other.name, other.identity)

    def __hash__(self) -> int:
        return hash((self.name, self.identity))

    def __repr__(self) -> str:
        return f"Step({self.name!r}, identity={self.identity!r}, deps={[d.name for d in self.deps]})"


def _checked_inputs(name: str, inputs: Any) -> dict[str, str]:
    """A sorted private copy of ``inputs``; it lands in artifact.json, so it must be str -> str."""
    if not isinstance(inputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        raise TypeError(f"step {name!r}: inputs must be a dict of relative file name -> content hash (str -> str)")
    return dict(sorted(inputs.items()))


def _check_descriptive(name: str, stage: Any, source: Any) -> None:
    if not isinstance(stage, str):
        raise TypeError(f"step {name!r}: stage must be a str, got {type(stage).__name__}")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"step {name!r}: source must be a str or None, got {type(source).__name__}")


@dataclass(frozen=True)
class StepRecord:
    """A built step as its dependents see it: where its output is and what it returned."""

    name: str
    identity: str
    output: str                      # step dir (local path or fsspec URL; under the mirror for mirror hits)
    result: dict                     # the fn's return value, minus "counters"
    counters: dict[str, int] = field(default_factory=dict)

    def path(self, *parts: str) -> str:
        """Join a path relative to the step's output dir."""
        return posixpath.join(self.output, *parts)


@dataclass
class StepContext:
    """What a step function receives. ``exec_config`` is passed through untouched from run_steps."""

    step: Step
    output: str
    deps: dict[str, StepRecord]
    exec_config: Any = None
    counters: dict[str, int] = field(default_factory=dict)
    # The newest earlier SUCCESS build of this step's name under another identity (its dir), for
    # per-file reuse (steps/reuse.py); None when there is none or the step is built fresh (--force, or
    # its own or a dependency's build was damaged).
    earlier: str | None = None
    _emit: Callable[[dict], None] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def identity(self) -> str:
        return self.step.identity

    @property
    def config(self) -> dict:
        return self.step.config

    def path(self, *parts: str) -> str:
        """Join a path relative to this step's output dir."""
        return posixpath.join(self.output, *parts)

    def increment(self, name: str, n: int = 1) -> None:
        """Add to a counter that lands in the artifact record and the run summary."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + int(n)

    def log(self, message: str, **fields: Any) -> None:
        """Log through ``logging`` and as a structured ``step_log`` event in events.jsonl."""
        logging.getLogger(f"datakit.steps.{self.step.name}").info(message)
        if self._emit is not None:
            self._emit({"event": "step_log", "step": self.step.name, "identity": self.step.identity,
                        "message": message, **fields})


def collect_steps(steps: Step | Iterable[Step]) -> list[Step]:
    """The given steps plus all their deps, deps first, in a deterministic order.
    Names must be unique across the DAG (they key ``ctx.deps``, --only and --force)."""
    roots = [steps] if isinstance(steps, Step) else list(steps)
    order: list[Step] = []
    seen: dict[str, Step] = {}
    visiting: set[str] = set()

    def visit(step: Step) -> None:
        if not isinstance(step, Step):
            raise TypeError(f"expected a Step, got {type(step).__name__}")
        if step.name in seen:
            if seen[step.name].identity != step.identity:
                raise ValueError(f"two different steps are named {step.name!r} (identities "
                                 f"{seen[step.name].identity} and {step.identity}); step names must be unique")
            return
        if step.name in visiting:
            raise ValueError(f"dependency cycle through step {step.name!r}")
        visiting.add(step.name)
        for dep in step.deps:
            visit(dep)
        visiting.discard(step.name)
        seen[step.name] = step
        order.append(step)

    for s in roots:
        visit(s)
    return order
