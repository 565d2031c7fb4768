"""A corpus whose best mixture is known by construction, for the search's tests and benchmark.

`clean`: English prose (the /usr/share/common-licenses texts, or the standard library's email package
when absent), one document per paragraph. `noise`: random letter strings, ``noise_ratio`` times as many
characters. A target drawn from `clean` is served badly by the token-proportional mixture (mostly
noise), so a mixture search must move weight to `clean` to win.
"""

from __future__ import annotations

import json
import os
import random

from datakit.tokenize.fixtures import license_texts, stdlib_texts


def clean_docs() -> list[str]:
    texts = license_texts() or stdlib_texts(300_000, subdir="email")
    return [p.strip() for t in texts for p in t.split("\n\n") if len(p.strip()) > 200]


def noise_docs(total_chars: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    docs, size = [], 0
    while size < total_chars:
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(rng.randint(60, 120))]
        docs.append(" ".join(words))
        size += len(docs[-1])
    return docs


def write_corpus(root: str, noise_ratio: float = 3.0, repeat_clean: int = 1) -> dict[str, str]:
    """Write clean.jsonl and noise.jsonl under ``root``; returns name -> path. ``repeat_clean`` copies
    the clean paragraphs with a numbered suffix, for a larger corpus (each copy a distinct document)."""
    clean = [f"{d} ({i})" if i else d for i in range(repeat_clean) for d in clean_docs()]
    noise = noise_docs(int(noise_ratio * sum(len(d) for d in clean)))
    out = {}
    for name, docs in (("clean", clean), ("noise", noise)):
        out[name] = os.path.join(root, f"{name}.jsonl")
        with open(out[name], "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
    return out
