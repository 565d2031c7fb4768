"""The mixture stage: owns the `mixture:` section (datakit.mix.config) and, when it has a `search:`,
adds the proxy-model mixture search's steps after tokenize (datakit.stages.mixture_steps); the last of them
is the graph's `mixture` product. The train stage reads the same section to resolve its weights;
`weights: search` makes it depend on that product."""

from __future__ import annotations

from functools import partial

from datakit.manifest import Section
from datakit.mix.config import MixtureConfig, SearchConfig
from datakit.steps import Step

from . import mixture_steps as S
from .contract import MIXTURE, TOKENIZER, TOKENS, Graph, Stage, step_identity

VERSION = "1"


def _check_names(graph: Graph, search: SearchConfig) -> None:
    unknown = sorted((set(search.target.validation) | set(search.min_weight)) - set(graph.tokens))
    if unknown:
        raise ValueError(f"mixture.search names {', '.join(unknown)}, not a tokenized component "
                         f"(components: {', '.join(sorted(graph.tokens))})")


def add_search_steps(graph: Graph, mix: MixtureConfig) -> Step:
    """Add mix-target (jsonl only), mix-proxies, mix-proxy-NN, mix-fit, mix-verify (verify only), mix-search."""
    search = mix.search
    assert search is not None and graph.tokenizer is not None
    _check_names(graph, search)
    components = sorted(n for n, w in graph.weights.items() if w > 0 and n in graph.tokens)
    named = sorted(set(components) | set(search.target.validation))
    token_steps = {n: graph.tokens[n].name for n in named}
    deps: tuple[Step, ...] = tuple(graph.tokens[n] for n in named)
    target = None
    if search.target.jsonl:
        target = graph.add(Step(S.TARGET_STEP, partial(S.target_step, jsonl=search.target.jsonl,
                                                       text_field=search.target.text_field,
                                                       tokenizer=graph.tokenizer.name),
                                step_identity(search.target, ("jsonl", "text_field")),
                                deps=(graph.tokenizer,), version=VERSION, stage=STAGE.name))
        deps += (target,)
    tname = target.name if target else None
    common = {"search": step_identity(search), "temperature": mix.temperature, "components": components}
    # a proxy's identity holds only what its run depends on: draw i of the seeded Dirichlet does not
    # depend on how many are drawn, so raising `proxies` (or changing the choice's settings) reuses them
    per_proxy = {k: common["search"][k] for k in ("seed", "concentration", "proxy", "target")}
    proxies = [Step(f"mix-proxy-{i:02d}", partial(S.proxy_step, index=i, search=search, temperature=mix.temperature,
                                                  token_steps=token_steps, components=components, target_name=tname),
                    {"search": per_proxy, "temperature": mix.temperature, "components": components, "index": i},
                    deps=deps, version=VERSION, stage=STAGE.name)
               for i in range(search.proxies)]
    # first, one step that trains the missing proxies in parallel on the backend; the runner then finds
    # each proxy built (a proxy deleted later is rebuilt by the runner itself, one at a time)
    graph.add(Step(S.PROXIES_STEP, partial(S.proxies_step, proxies=tuple(proxies)),
                   {"proxies": [p.identity for p in proxies]}, deps=deps, version=VERSION, stage=STAGE.name))
    for p in proxies:
        graph.add(p)
    budget_cfg = graph.manifest.sections.get("train") or search.proxy
    budget = {"steps": budget_cfg.steps, "batch_size": budget_cfg.batch_size, "seq_len": budget_cfg.seq_len}
    names = [p.name for p in proxies]
    fit = graph.add(Step("mix-fit", partial(S.fit_step, search=search, mix=mix, proxies=names,
                                            token_steps=token_steps, components=components, budget=budget),
                         {**common, "max_epochs": mix.max_epochs, "budget": budget},
                         deps=(*proxies, *deps), version=VERSION, stage=STAGE.name))
    verify = None
    if search.verify:
        verify = graph.add(Step("mix-verify", partial(S.verify_step, search=search, token_steps=token_steps,
                                                      target_name=tname, fit_name=fit.name),
                                common, deps=(fit, *deps), version=VERSION, stage=STAGE.name))
    return graph.add(Step(S.SEARCH_STEP, partial(S.search_step, search=search, proxies=names, fit_name=fit.name,
                                                 verify_name=verify.name if verify else None),
                          common, deps=(fit, *proxies, *((verify,) if verify else ())), version=VERSION,
                          stage=STAGE.name))


def build(graph: Graph) -> None:
    mix: MixtureConfig | None = graph.config(STAGE)
    if mix is not None and mix.search is not None:
        graph.mixture = add_search_steps(graph, mix)


STAGE = Stage(name="mixture", version=VERSION, build=build, section=Section("mixture", MixtureConfig, optional=True),
              consumes=(TOKENIZER, TOKENS), produces=(MIXTURE,),
              code=("datakit.mix", "datakit.stages.mixture", "datakit.stages.mixture_steps"),
              ferry_check="datakit.ferry.checks_mixture:check_mixture")
