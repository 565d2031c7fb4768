"""From a manifest to the DAG of steps that `datakit run` executes.

    download? -> normalize -> exact dedup ─┐
                        └─> minhash -> fuzzy dups ─┼─> consolidate -> tokenizer -> tokenize -> train
                        └─> decontaminate ─────────┘

Every step's identity covers its versioned config and its inputs, never where they live: local inputs
enter as a fingerprint of their relative names, sizes and modification times, benchmark files as the
sha256 of their content. Changing any input, parameter or stage version therefore builds new outputs
beside the old ones instead of serving a stale cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

from datakit.shuffle import ExecConfig, FileInfo, list_files
from datakit.core.fsio import sha256_file
from datakit.sources.manifest import Manifest, SourceSpec
from datakit.steps import Step, StepContext

# Stage implementation versions: bump one when its output for the same input changes.
VERSIONS = {
    "download": "1", "normalize": "1", "exact": "1", "minhash": "1", "fuzzy": "1", "decontaminate": "1",
    "consolidate": "1", "tokenizer": "1", "tokenize": "1", "train": "1",
}


def _exec(ctx: StepContext) -> ExecConfig | None:
    return ctx.exec_config


def _add_counters(ctx: StepContext, result: dict) -> dict:
    """The runner records `result["counters"]` in the artifact; it takes flat str -> int only."""
    counters = result.get("counters") or {}
    result["counters"] = {k: int(v) for k, v in counters.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return result


def source_files(spec: SourceSpec) -> list[FileInfo]:
    files = list_files(list(spec.uris), exclude=spec.exclude)
    if spec.max_files:
        files = files[: spec.max_files]
    return files


def local_fingerprint(files: list[FileInfo]) -> str:
    """Names relative to the files' common root, sizes and mtimes: stable across machines and prefixes."""
    if not files:
        return "empty"
    root = os.path.commonpath([os.path.dirname(f.path) for f in files])
    h = hashlib.sha256()
    for f in files:
        st = os.stat(f.path)
        h.update(f"{os.path.relpath(f.path, root)}\0{f.size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def _source_config(spec: SourceSpec) -> dict:
    d = spec.to_dict()
    for k in ("uri", "priority", "license", "weight", "exclude", "max_files", "revision", "sha256"):
        d.pop(k, None)
    return d


# ---------------------------------------------------------------- step functions
def _download_fn(spec: SourceSpec):
    def run(ctx: StepContext) -> dict:
        from datakit.sources.fetch import fetch_source

        return _add_counters(ctx, fetch_source(spec, ctx.output).to_dict())

    return run


def _normalize_fn(spec: SourceSpec, manifest: Manifest, download: Step | None):
    def run(ctx: StepContext) -> dict:
        from datakit.normalize.config import NormalizeConfig
        from datakit.normalize.pipeline import normalize_source

        if download is not None:
            files = list_files(ctx.deps[download.name].path("files"))
        else:
            files = source_files(spec)
        ncfg = dataclasses.asdict(manifest.normalize)
        if spec.html_main_content is not None:
            ncfg["html_main_content"] = spec.html_main_content
        known = {f.name for f in dataclasses.fields(NormalizeConfig)}
        cfg = NormalizeConfig(**{k: v for k, v in ncfg.items() if k in known})
        result = normalize_source(
            name=spec.name, files=files, fmt=spec.format, text_field=spec.text_field, id_field=spec.id_field,
            bare=spec.bare, dedup=spec.dedup, out_dir=ctx.output, cfg=cfg, exec_config=_exec(ctx),
        )
        return _add_counters(ctx, result.to_dict())

    return run


def _minhash_cfg(manifest: Manifest):
    from datakit.dedup.minhash import MinHashConfig

    d = manifest.dedup
    kw = dict(ngram=d.ngram, ngram_unit=d.ngram_unit, seed=d.seed, max_text_chars=d.max_text_chars)
    if d.threshold is not None:
        return MinHashConfig.for_threshold(d.threshold, num_perms=d.num_perms, **kw)
    return MinHashConfig(num_perms=d.num_perms, bands=d.bands, rows=d.rows, **kw)


def _dedup_steps(manifest: Manifest, normalize: dict[str, Step]) -> tuple[list[Step], list[Step]]:
    """(all dedup/decontam steps, the attribute steps consolidate must apply)."""
    steps: list[Step] = []
    attrs: list[Step] = []
    names = [s.name for s in manifest.sources]
    prio = {s.name: s.priority for s in manifest.sources}
    norm_deps = tuple(normalize[n] for n in names)

    def refs(ctx: StepContext) -> list[tuple[str, str, int]]:
        return [(n, ctx.deps[normalize[n].name].output, prio[n]) for n in names]

    if manifest.dedup.exact:
        def exact(ctx: StepContext) -> dict:
            from datakit.dedup.exact import exact_dups

            return _add_counters(ctx, exact_dups(refs(ctx), ctx.output, _exec(ctx)).to_dict())

        step = Step("exact-dedup", exact, {"priority": names}, deps=norm_deps, version=VERSIONS["exact"])
        steps.append(step)
        attrs.append(step)

    if manifest.dedup.fuzzy:
        mcfg = _minhash_cfg(manifest)
        minhash: dict[str, Step] = {}
        for n in names:
            def mh(ctx: StepContext, n: str = n) -> dict:
                from datakit.dedup.minhash import minhash_source

                res = minhash_source(n, ctx.deps[normalize[n].name].output, ctx.output, mcfg, _exec(ctx))
                return _add_counters(ctx, res.to_dict())

            minhash[n] = Step(f"minhash-{n}", mh, dataclasses.asdict(mcfg), deps=(normalize[n],),
                              version=VERSIONS["minhash"])
            steps.append(minhash[n])
        fcfg = {"verify": manifest.dedup.verify, "verify_threshold": manifest.dedup.verify_threshold}

        def fuzzy(ctx: StepContext) -> dict:
            from datakit.dedup.fuzzy import FuzzyConfig, FuzzySource, fuzzy_dups

            srcs = [FuzzySource(n, ctx.deps[normalize[n].name].output, ctx.deps[minhash[n].name].output, prio[n])
                    for n in names]
            return _add_counters(ctx, fuzzy_dups(srcs, ctx.output, FuzzyConfig(**fcfg), _exec(ctx)).to_dict())

        step = Step("fuzzy-dups", fuzzy, {"priority": names, **fcfg},
                    deps=norm_deps + tuple(minhash[n] for n in names), version=VERSIONS["fuzzy"])
        steps.append(step)
        attrs.append(step)

    benches = manifest.decontaminate.benchmarks
    if benches:
        bench_cfg = [{"name": b.name, "text_fields": list(b.text_fields), "sha256": sha256_file(b.path)}
                     for b in benches]

        def decon(ctx: StepContext) -> dict:
            from datakit.dedup.decontaminate import BenchmarkSpec, DecontamConfig, decontaminate

            specs = [BenchmarkSpec(b.name, b.path, tuple(b.text_fields)) for b in benches]
            res = decontaminate(refs(ctx), specs, ctx.output, DecontamConfig(ngram=manifest.decontaminate.ngram),
                                _exec(ctx))
            return _add_counters(ctx, res.to_dict())

        step = Step("decontaminate", decon, {"benchmarks": bench_cfg, "ngram": manifest.decontaminate.ngram},
                    deps=norm_deps, version=VERSIONS["decontaminate"])
        steps.append(step)
        attrs.append(step)
    return steps, attrs


def _consolidate_fn(name: str, normalize: Step, attrs: list[Step]):
    def run(ctx: StepContext) -> dict:
        from datakit.dedup.consolidate import consolidate

        res = consolidate(name, ctx.deps[normalize.name].output, [ctx.deps[a.name].output for a in attrs],
                          ctx.output, _exec(ctx))
        return _add_counters(ctx, res.to_dict())

    return run


def _tokenizer_step(manifest: Manifest, inputs: dict[str, Step]) -> Step:
    spec = manifest.tokenize
    if spec.tokenizer:
        given = spec.tokenizer

        def copy(ctx: StepContext) -> dict:
            from datakit.tokenize.tokenizer import load_tokenizer
            from datakit.core.fsio import atomic_write_bytes, open_read

            with open_read(given) as f:
                data = f.read()
            atomic_write_bytes(f"{ctx.output}/tokenizer.json", data)
            _, ident = load_tokenizer(f"{ctx.output}/tokenizer.json")
            return {"tokenizer": "tokenizer.json", "identity": dataclasses.asdict(ident)}

        ref = given if "://" in given and not given.startswith("file://") else sha256_file(given)
        return Step("tokenizer", copy, {"given": ref}, version=VERSIONS["tokenizer"])

    names = sorted(inputs)

    def train(ctx: StepContext) -> dict:
        from datakit.tokenize.tokenizer import train_tokenizer

        dirs = [ctx.deps[inputs[n].name].output for n in names]
        return train_tokenizer(dirs, ctx.output, vocab_size=spec.vocab_size, max_bytes=spec.train_tokenizer_bytes,
                               seed=spec.seed)

    cfg = {"vocab_size": spec.vocab_size, "max_bytes": spec.train_tokenizer_bytes, "seed": spec.seed}
    return Step("tokenizer", train, cfg, deps=tuple(inputs[n] for n in names), version=VERSIONS["tokenizer"])


def _tokenize_fn(name: str, source: Step, tokenizer: Step, manifest: Manifest):
    spec = manifest.tokenize

    def run(ctx: StepContext) -> dict:
        from datakit.tokenize.tokenize_step import tokenize_source

        res = tokenize_source(name, ctx.deps[source.name].output, ctx.output,
                              ctx.deps[tokenizer.name].path("tokenizer.json"),
                              validation_fraction=spec.validation_fraction, bos=spec.bos, exec_config=_exec(ctx))
        d = res.to_dict()
        d.pop("out_dir", None)
        for split in d.get("splits", {}).values():  # keep the record relocatable (mirrors, moved prefixes)
            if isinstance(split, dict) and isinstance(split.get("path"), str):
                split["path"] = os.path.relpath(split["path"], ctx.output)
        return _add_counters(ctx, d)

    return run


def _tokenize_version() -> str:
    from datakit.tokenize.tokenize_step import VERSION

    return f"{VERSIONS['tokenize']}.{VERSION}"


def _train_step(manifest: Manifest, tokenize: dict[str, Step]) -> Step:
    spec = manifest.train
    assert spec is not None
    weights = {s.name: s.weight for s in manifest.sources if s.weight > 0}
    cfg_dict = spec.to_config_dict()
    from datakit.train.config import TrainConfig

    TrainConfig.from_dict(cfg_dict).validate()  # a config that cannot work fails before any step runs

    def run(ctx: StepContext) -> dict:
        from datakit.train.config import TrainConfig
        from datakit.train.stage import train_model

        def split(n: str, which: str) -> str:
            rec = ctx.deps[tokenize[n].name]
            return os.path.join(rec.output, rec.result["splits"][which]["path"])

        train = {n: split(n, "train") for n in weights}
        val = {n: split(n, "validation") for n in weights
               if ctx.deps[tokenize[n].name].result["splits"].get("validation", {}).get("docs", 1)}
        res = train_model(TrainConfig.from_dict(cfg_dict), train, weights, val, ctx.output)
        d = res.to_dict() if hasattr(res, "to_dict") else dataclasses.asdict(res)
        return d

    return Step("train", run, {"train": cfg_dict, "weights": weights},
                deps=tuple(tokenize[n] for n in sorted(tokenize)), version=VERSIONS["train"], resumable=True)


def exec_config(prefix: str, backend: str, workers: int | None = None, **options: Any) -> ExecConfig:
    """The engine settings a run hands its steps.

    On Ray, map outputs must be readable by reducers on other nodes, so shuffle files go under
    `<prefix>/.shuffle` (an object store or shared mount when the cluster has several nodes; the engine
    refuses a node-local one) and, being there, double as stage checkpoints a rerun resumes from. On the
    local backend they stay in a temporary directory on this machine's disk.
    """
    if prefix.startswith("memory://") and backend != "inline":
        raise ValueError(f"prefix {prefix}: memory:// lives inside one process, but the {backend} backend runs "
                         "steps in worker processes that could not see each other's outputs; use backend "
                         "'inline' for memory://, or a prefix on disk or an object store")
    work_dir = f"{prefix.rstrip('/')}/.shuffle" if backend == "ray" else None
    return ExecConfig(backend=backend, max_workers=workers, work_dir=work_dir, **options)


def build_steps(manifest: Manifest) -> list[Step]:
    """The whole DAG for a manifest, in a deterministic order."""
    if manifest.dedup.exact or manifest.dedup.fuzzy:
        for i, spec in enumerate(manifest.sources):
            if spec.dedup == "none":
                raise ValueError(
                    f"{manifest.path}: sources[{i}].dedup: 'none' keeps duplicate ids in {spec.name!r}, but the "
                    "corpus-level dedup steps (dedup.exact / dedup.fuzzy) mark documents by id and need one row "
                    "per id; remove `dedup: none`, or set dedup: {exact: false, fuzzy: false} to keep every copy"
                )
    steps: list[Step] = []
    normalize: dict[str, Step] = {}
    for spec in manifest.sources:
        download = None
        if spec.remote:
            download = Step(
                f"download-{spec.name}", _download_fn(spec),
                {"uri": list(spec.uris), "revision": spec.revision, "sha256": spec.sha256,
                 "exclude": list(spec.exclude), "max_files": spec.max_files},
                version=VERSIONS["download"],
            )
            steps.append(download)
            fingerprint = "download"
        else:
            fingerprint = local_fingerprint(source_files(spec))
        cfg = {"source": _source_config(spec), "normalize": dataclasses.asdict(manifest.normalize),
               "input": fingerprint}
        step = Step(f"normalize-{spec.name}", _normalize_fn(spec, manifest, download), cfg,
                    deps=(download,) if download else (), version=VERSIONS["normalize"])
        normalize[spec.name] = step
        steps.append(step)

    dedup_steps, attrs = _dedup_steps(manifest, normalize)
    steps.extend(dedup_steps)
    final: dict[str, Step] = {}
    for spec in manifest.sources:
        if attrs:
            final[spec.name] = Step(f"consolidate-{spec.name}", _consolidate_fn(spec.name, normalize[spec.name], attrs),
                                    {"attributes": [a.name for a in attrs]},
                                    deps=(normalize[spec.name], *attrs), version=VERSIONS["consolidate"])
            steps.append(final[spec.name])
        else:
            final[spec.name] = normalize[spec.name]

    tokenizer = _tokenizer_step(manifest, final)
    steps.append(tokenizer)
    tokenize: dict[str, Step] = {}
    for spec in manifest.sources:
        tokenize[spec.name] = Step(f"tokenize-{spec.name}", _tokenize_fn(spec.name, final[spec.name], tokenizer, manifest),
                                   {"validation_fraction": manifest.tokenize.validation_fraction,
                                    "bos": manifest.tokenize.bos},
                                   deps=(final[spec.name], tokenizer), version=_tokenize_version(),
                                   resumable=True)
        steps.append(tokenize[spec.name])
    if manifest.train is not None:
        steps.append(_train_step(manifest, tokenize))
    return steps
