"""The pii stage: emails, public IP addresses and (optionally) phone numbers replaced by placeholders
(`datakit.quality.pii`), the last stage that touches text: after consolidate and line dedup, before
the tokenizer.

Why last: every dedup decision (exact, fuzzy, decontamination, line dedup) is made on the text as it
was, and ids stay the content hashes of the deduplicated text: redaction keeps each document's id, so
an id still joins to the dedup attributes and removed/ records of every earlier stage, and two
documents that differ only in an address are not merged by their redaction. (Downstream, an id after
this stage is therefore the hash of the text before redaction.) Nothing is removed; outputs/removed/
files are written empty so every documents-rewriting stage has the same layout.

Counters: docs_in, docs_out, changed (documents with a redaction), ``redacted/<kind>`` per kind
(email, ipv4, ipv6, phone).
"""

from __future__ import annotations

from functools import partial

import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.manifest import Section
from datakit.quality.config import PiiConfig, PiiRules
from datakit.quality.pii import redact
from datakit.steps import StepContext

from .contract import DOCUMENTS, Graph, Stage
from .quality_common import add_source_steps
from .transform import FileKey, documents_result, run_per_file

VERSION = "2"


def redact_file(name: str, table: pa.Table, rules: PiiRules) -> tuple[pa.Table, list, dict[str, int]]:
    """One documents file with its PII replaced; ids, order and every other column as they were."""
    texts, changed = [], 0
    stats = {"docs_in": table.num_rows, "docs_out": table.num_rows, "removed": 0}
    for text in table.column("text").to_pylist():
        new, counts = redact(text, rules)
        for kind, n in counts.items():
            if n:
                stats[f"redacted/{kind}"] = stats.get(f"redacted/{kind}", 0) + n
        changed += new != text
        texts.append(new)
    stats["changed"] = changed
    i = table.schema.get_field_index("text")
    out = table.set_column(i, table.schema.field(i), an.column(texts, table.schema.field(i).type))
    return out, [], stats


def _run(ctx: StepContext, source: str, documents: str, rules: PiiRules) -> dict:
    names, totals = run_per_file(ctx, documents, partial(redact_file, rules=rules), f"pii-{source}",
                                 reuse_key=FileKey())
    for k in ("docs_in", "docs_out", "removed", "changed"):
        totals.setdefault(k, 0)
    return documents_result(names, totals, stage=STAGE.name, source=source)


def build(graph: Graph) -> None:
    cfg: PiiConfig | None = graph.config(STAGE)
    if cfg is not None:
        graph.keep_ids(add_source_steps(graph, STAGE, cfg, _run).values())  # redaction keeps each id


STAGE = Stage(name="pii", version=VERSION, build=build, section=Section("pii", PiiConfig, optional=True),
              consumes=(DOCUMENTS,), produces=(DOCUMENTS,),
              code=("datakit.quality.pii", "datakit.quality.config", "datakit.stages.pii",
                    "datakit.stages.quality_common", "datakit.stages.transform"),
              ferry_check="datakit.ferry.checks_quality:check_pii")
