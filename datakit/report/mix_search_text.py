"""The mixture search as text, for `datakit mix show` and `datakit mix search`: the decision and its
reason, the gain with its interval beside the seed noise, the fit (every model tried, accepted or
not), the trust region, and every proxy (round, weights, measured and predicted bits per byte).
Reads the search's result (`MixtureResult`), so it never names a step."""

from __future__ import annotations

import textwrap

from datakit.core.results import MixtureResult

WIDTH = 100


def _ws(weights: dict) -> str:
    return ", ".join(f"{n} {float(w):.3f}" for n, w in weights.items())


def _span(g: dict | None) -> str:
    if not g:
        return "not measured"
    return f"{g['value']:+.4f} bpb [{g['lo']:+.4f}, {g['hi']:+.4f}] at {g['confidence']:.0%}"


def _bpb(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def summary_lines(res: MixtureResult) -> list[str]:
    """The decision, the two mixtures and the gains: what `mix search` prints."""
    base, cand, dec = res.baseline, res.candidate, res.decision or {}
    noise, gain = res.noise or {}, res.gain or {}
    lines = [f"proportional: {_ws(base.weights)}  measured {_bpb(base.measured_bpb)} bpb "
             f"({len(base.runs or [])} seeds)"] if base else []
    if cand is not None:
        measured = f"measured {_bpb(cand.measured_bpb)}" if cand.measured_bpb is not None else "not verified"
        lines.append(f"candidate:    {_ws(cand.weights)}  predicted {_bpb(cand.predicted_bpb)}, {measured} bpb")
    lines += [f"gain:         measured {_span(gain.get('measured'))}; predicted {_span(gain.get('predicted'))}; "
              f"seed SD {_bpb(noise.get('seed_sd'))} bpb ({noise.get('df')} df)",
              f"decision:     returned {dec.get('returned')}: {dec.get('reason')}",
              f"chosen:       {_ws(res.chosen.weights)}"]
    return _wrapped(lines, " " * 14)


def _wrapped(lines: list[str], indent: str) -> list[str]:
    """Each line folded at WIDTH columns, continuations indented (the table's 100-column rule)."""
    return [w for line in lines for w in textwrap.wrap(line, WIDTH, subsequent_indent=indent,
                                                       break_on_hyphens=False) or [""]]


def _fit_line(fit: dict) -> str:
    tried = "; ".join(f"{t['model']} {t['loo_rmse']:.4f}/{t['spread']:.4f}{'' if t['accepted'] else ' rejected'}"
                      for t in fit.get("tried") or [])
    state = "accepted" if fit.get("accepted") else "rejected: none used"
    return (f"fit: {fit.get('model')} ({state}), R² {fit.get('r2', 0):.3f}, leave-one-out RMSE "
            f"{fit.get('loo_rmse', 0):.4f} vs spread {fit.get('spread', 0):.4f} bpb; tried (LOO/spread): {tried}")


def _trust_line(trust: dict) -> str:
    box = ", ".join(f"{n} [{lo:.3f}, {hi:.3f}]" for n, (lo, hi) in trust.get("box", {}).items())
    return (f"trust region: the hull of {trust.get('samples')} proxies expanded {trust.get('expand')} toward every "
            f"corner: {box}; the candidate is {trust.get('nearest_proxy_l1', 0):.3f} (L1) from the nearest proxy")


def detail_lines(res: MixtureResult) -> list[str]:
    """Everything: the summary, the fit, the trust region, the rounds and the proxy table."""
    lines = ["mixture search:"] + _wrapped(["  " + x for x in summary_lines(res)], " " * 16)
    if res.fit:
        lines += _wrapped(["  " + _fit_line(res.fit)], " " * 4)
    if res.trust:
        lines += _wrapped(["  " + _trust_line(res.trust)], " " * 4)
    names = sorted(res.baseline.weights) if res.baseline else []
    head = f"  {'proxy':<18} {'round':>5} " + " ".join(f"{n[:8]:>8}" for n in names) + f" {'measured':>9} " \
                                                                                        f"{'predicted':>9}  runs"
    lines.append(head)
    for p in res.proxies or []:
        runs = ", ".join(f"{r:.4f}" for r in p.get("runs", []))
        weights = " ".join(f"{p['weights'].get(n, 0.0):>8.3f}" for n in names)
        lines.append(f"  {p['name']:<18} {p['round']:>5} " + weights
                     + f" {_bpb(p['measured_bpb']):>9} {_bpb(p.get('predicted_bpb')):>9}  {runs}".rstrip())
    return lines
