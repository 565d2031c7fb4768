"""The mixture stage: owns the `mixture:` section (datakit.mix.config) and, when it has a `search:`,
adds the proxy-model mixture search's steps after tokenize (runs: datakit.stages.mixture_steps; fits and
decision: datakit.stages.mixture_choice); the last of them is the graph's `mixture` product. The train
stage reads the same section to resolve its weights; `weights: search` makes it depend on that product.

The steps, in order (R: rounds, S: seeds):

    mix-proxies        wave 1: round one's proxies and the seed repeats, trained in parallel
      mix-proxy-NN, mix-proxy-NN-sK (the first noise_proxies proxies, K = 1..S-1; proxy 00 is proportional)
    mix-fit-rR         (R > 1) round R's fit; round R+1 samples around its choice
    mix-proxies-rR     wave R: round R's proxies mix-proxy-rR-NN
    mix-fit            the final fit: the candidate within the trust region
    mix-verify         (verify) the last wave: the candidate under each seed, mix-verify-sK
    mix-search         the decision and the mixture file
"""

from __future__ import annotations

from functools import partial

from datakit.manifest import Section
from datakit.mix.config import MixtureConfig, SearchConfig
from datakit.steps import Step

from . import mixture_steps as S
from .contract import MIXTURE, TOKENIZER, TOKENS, Graph, Stage, step_identity

VERSION = "2"


def _check_names(graph: Graph, search: SearchConfig) -> None:
    unknown = sorted((set(search.target.validation) | set(search.min_weight)) - set(graph.tokens))
    if unknown:
        raise ValueError(f"mixture.search names {', '.join(unknown)}, not a tokenized component "
                         f"(components: {', '.join(sorted(graph.tokens))})")


def _wave(graph: Graph, name: str, runs: list[Step], deps: tuple[Step, ...]) -> None:
    """One step that trains the wave's missing runs in parallel on the backend, then the runs (the
    runner finds each built; a run deleted later is rebuilt by the runner itself, one at a time)."""
    graph.add(Step(name, partial(S.proxies_step, proxies=tuple(runs)), {"proxies": [r.identity for r in runs]},
                   deps=deps, version=VERSION, stage=STAGE.name))
    for r in runs:
        graph.add(r)


class _Search:
    """Builds one search's steps: the settings every run shares, kept while the rounds are added."""

    def __init__(self, graph: Graph, mix: MixtureConfig, deps: tuple[Step, ...], run_args: dict, budget: dict):
        self.graph, self.mix, self.search, self.deps, self.run_args = graph, mix, mix.search, deps, run_args
        ident = step_identity(self.search)
        # a run's identity holds only what it depends on: draw i of a seeded Dirichlet does not depend on
        # how many are drawn, so raising `proxies` (or changing the choice's settings) reuses them
        self.run_id = {"search": {k: ident[k] for k in ("seed", "concentration", "proxy", "target")},
                       "temperature": mix.temperature, "components": run_args["components"]}
        self.fit_id = {"choice": {k: ident[k] for k in ("seed", "trust", "candidates", "min_weight", "confidence")},
                       "max_epochs": mix.max_epochs, "budget": budget, "temperature": mix.temperature,
                       "components": run_args["components"]}
        self.budget = budget

    def run(self, name: str, draw: S.Draw, seed: int, extra: dict, deps: tuple[Step, ...] = (),
            same_as: str | None = None) -> Step:
        return Step(name, partial(S.run_step, draw=draw, seed=seed, same_as=same_as, **self.run_args),
                    {**self.run_id, **extra, "seed": seed}, deps=(*deps, *self.deps), version=VERSION,
                    stage=STAGE.name)

    def fit(self, name: str, groups: list[list[Step]], round_no: int) -> Step:
        from . import mixture_choice as C  # the search's numerics: imported only by a run that searches

        runs = tuple(r for g in groups for r in g)
        fn = partial(C.fit_step, search=self.search, mix=self.mix, groups=[[r.name for r in g] for g in groups],
                     token_steps=self.run_args["token_steps"], components=self.run_args["components"],
                     budget=self.budget, round_no=round_no)
        return self.graph.add(Step(name, fn, {**self.fit_id, "round": round_no}, deps=(*runs, *self.deps),
                                   version=VERSION, stage=STAGE.name))

    def round_one(self) -> list[list[Step]]:
        s = self.search
        groups = [[self.run(f"mix-proxy-{i:02d}" + (f"-s{k}" if k else ""), S.Draw(1, i), k, {"index": i})
                   for k in range(s.seeds if i < s.noise_proxies else 1)] for i in range(s.proxies)]
        _wave(self.graph, S.PROXIES_STEP, [r for g in groups for r in g], self.deps)
        return groups

    def later_round(self, r: int, fit: Step) -> list[list[Step]]:
        extra = {"round": r, "refine_concentration": self.search.refine_concentration}
        groups = [[self.run(f"mix-proxy-r{r}-{j:02d}", S.Draw(r, j, fit.name), 0, {**extra, "index": j}, (fit,))]
                  for j in range(self.search.refine)]
        _wave(self.graph, f"{S.PROXIES_STEP}-r{r}", [g[0] for g in groups], (fit, *self.deps))
        return groups

    def verify(self, fit: Step, proportional: list[Step]) -> list[Step]:
        runs = [self.run(f"mix-verify-s{k}", S.Draw(0, 0, fit.name), k, {"verify": True}, (fit, proportional[k]),
                         same_as=proportional[k].name) for k in range(self.search.seeds)]
        _wave(self.graph, "mix-verify", runs, (fit, *proportional, *self.deps))
        return runs


def add_search_steps(graph: Graph, mix: MixtureConfig) -> Step:
    """Add the search's steps (see the module docstring); returns mix-search."""
    from . import mixture_choice as C  # the search's numerics: imported only by a run that searches

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
    budget_cfg = graph.manifest.sections.get("train") or search.proxy
    budget = {"steps": budget_cfg.steps, "batch_size": budget_cfg.batch_size, "seq_len": budget_cfg.seq_len}
    args = {"search": search, "temperature": mix.temperature, "token_steps": token_steps, "components": components,
            "target_name": target.name if target else None}
    b = _Search(graph, mix, deps, args, budget)
    groups, rounds, round_fits = b.round_one(), [], []
    rounds += [1] * len(groups)
    for r in range(2, search.rounds + 1):
        round_fits.append(b.fit(f"mix-fit-r{r - 1}", groups, r - 1))
        new = b.later_round(r, round_fits[-1])
        groups, rounds = groups + new, rounds + [r] * len(new)
    fit = b.fit("mix-fit", groups, search.rounds)
    checks = b.verify(fit, groups[0]) if search.verify else []
    runs = [r for g in groups for r in g]
    fn = partial(C.search_step, search=search, groups=[[r.name for r in g] for g in groups], rounds=rounds,
                 fit_name=fit.name, round_fits=[f.name for f in round_fits], verify=[c.name for c in checks])
    return graph.add(Step(S.SEARCH_STEP, fn, {"search": step_identity(search), "temperature": mix.temperature,
                                              "components": components},
                          deps=(fit, *round_fits, *runs, *checks), version=VERSION, stage=STAGE.name))


def build(graph: Graph) -> None:
    mix: MixtureConfig | None = graph.config(STAGE)
    if mix is not None and mix.search is not None:
        graph.mixture = add_search_steps(graph, mix)


STAGE = Stage(name="mixture", version=VERSION, build=build, section=Section("mixture", MixtureConfig, optional=True),
              consumes=(TOKENIZER, TOKENS), produces=(MIXTURE,),
              code=("datakit.mix", "datakit.stages.mixture", "datakit.stages.mixture_steps",
                    "datakit.stages.mixture_choice"),
              ferry_check="datakit.ferry.checks_mixture:check_mixture")
