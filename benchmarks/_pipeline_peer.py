"""The datatrove side of benchmarks/pipeline.py; runs in the peer's own venv (.venv-bench), never imports datakit.

    .venv-bench/bin/python -m benchmarks._pipeline_peer ARGS_JSON RESULT_JSON

The pipeline is the one a datatrove 0.10 user writes for exact dedup -> MinHash dedup -> tokenization,
each block a LocalPipelineExecutor run with `workers` processes (tasks: one per input file where a block
reads the corpus, 14 for the buckets (one per band), 1 where the block is single-task by design):
  read_exact_sigs    JsonlReader -> ExactDedupSignature (xxhash-64 of the whole text)
  exact_find         ExactFindDedups (1 task: one finder bucket)
  minhash_sigs       JsonlReader -> ExactDedupFilter -> MinhashDedupSignature (word 5-grams, 14 x 8, spaCy
                     English words: datatrove's default; or whitespace-split words with "words": "whitespace")
  minhash_buckets    MinhashDedupBuckets
  minhash_cluster    MinhashDedupCluster
  filter_tokenize    JsonlReader -> ExactDedupFilter -> MinhashDedupFilter -> DocumentTokenizer (our
                     tokenizer.json, our EOS, shuffle_documents=False: the peer's fastest setting, and
                     our cache is not shuffled on disk either)
Datatrove's filters work by a document's position in its task's stream, so the last block re-reads the
corpus and re-applies the exact filter (an index lookup) rather than writing an intermediate copy. Both
filters of the last block get an exclusion_writer (uncompressed JSONL of the removed documents, about 15%
of the corpus), which is how the removed ids are known for scoring.
Result: each block's start/end (time.time(), for the parent's per-stage sampling), removed ids per
filter, and documents/tokens counted from the token files' indexes.
"""

from __future__ import annotations

import json
import os
import sys
import time


def doc_text(doc) -> str:
    """ExactDedupConfig's content getter; the return annotation picks datatrove's str hash function."""
    return doc.text


def word_tokenizer(words: str):
    """datatrove's default English words (spaCy, "en"), or a whitespace splitter: spaCy is most of the
    signature block's time, so --peer-words whitespace shows the peer at its fastest."""
    if words == "spacy":
        return "en"
    from datatrove.utils.word_tokenizers import WordTokenizer

    class WhitespaceTokenizer(WordTokenizer):
        def word_tokenize(self, text):
            return text.split()

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            return [(0, len(text))]

    return WhitespaceTokenizer("en")


def _blocks(a: dict) -> list[tuple[str, list, int, int]]:
    from datatrove.pipeline.dedup.exact_dedup import (ExactDedupConfig, ExactDedupFilter, ExactDedupSignature,
                                                      ExactFindDedups)
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    w, files, work = a["workers"], a["files"], a["work"]
    ex = ExactDedupConfig(content_getter=doc_text)
    mh = MinhashConfig(n_grams=a["ngram"], num_buckets=a["bands"], hashes_per_bucket=a["rows"], seed=1,
                       hash_config=HashConfig(precision=64))

    def reader():
        return JsonlReader(a["corpus"], glob_pattern="*.jsonl.zst", text_key="text", id_key="id")

    return [
        ("read_exact_sigs", [reader(), ExactDedupSignature(f"{work}/exact_sigs", config=ex)], files, w),
        ("exact_find", [ExactFindDedups(f"{work}/exact_sigs", f"{work}/exact_dups", config=ex)], 1, 1),
        ("minhash_sigs", [reader(), ExactDedupFilter(f"{work}/exact_dups", config=ex),
                          MinhashDedupSignature(f"{work}/mh_sigs", config=mh, language=word_tokenizer(a["words"]))],
         files, w),
        ("minhash_buckets", [MinhashDedupBuckets(f"{work}/mh_sigs", f"{work}/mh_buckets", config=mh)],
         a["bands"], w),
        ("minhash_cluster", [MinhashDedupCluster(f"{work}/mh_buckets", f"{work}/mh_remove", config=mh)], 1, 1),
        ("filter_tokenize", [
            reader(),
            ExactDedupFilter(f"{work}/exact_dups", config=ex,
                             exclusion_writer=JsonlWriter(f"{work}/removed_exact", compression=None)),
            MinhashDedupFilter(f"{work}/mh_remove",
                               exclusion_writer=JsonlWriter(f"{work}/removed_fuzzy", compression=None)),
            DocumentTokenizer(f"{work}/tokens", tokenizer_name_or_path=a["tokenizer"], eos_token=a["eos"],
                              shuffle_documents=False),
        ], files, w),
    ]


def _removed(folder: str) -> list[str]:
    ids: list[str] = []
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                ids.extend(json.loads(line)["id"] for line in f if line.strip())
    return ids


def _token_counts(folder: str) -> tuple[int, int]:
    """(documents, tokens incl. EOS) from DocumentTokenizer's .ds (uint16 ids) and .ds.index (uint64 ends)."""
    docs = tokens = 0
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        p = os.path.join(folder, name)
        if name.endswith(".ds"):
            tokens += os.path.getsize(p) // 2
        elif name.endswith(".ds.index"):
            docs += os.path.getsize(p) // 8
    return docs, tokens


def run_and_report(blocks: list[tuple[str, list, int, int]], removed: list[str]) -> None:
    """Run the blocks one after another (each one LocalPipelineExecutor, timed) and write the report:
    the stages, each ``removed`` folder's ids, and the tokens written. argv: the args JSON, the report path."""
    from datatrove.executor import LocalPipelineExecutor

    a = json.loads(sys.argv[1])
    stages = []
    for name, pipeline, tasks, workers in blocks:
        t0 = time.time()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers,
                              logging_dir=f"{a['work']}/logs/{name}").run()
        stages.append({"name": name, "start": t0, "end": time.time(), "tasks": tasks, "workers": workers})
    docs, tokens = _token_counts(f"{a['work']}/tokens")
    res = {"stages": stages, "removed": {f: _removed(f"{a['work']}/removed_{f}") for f in removed},
           "docs_tokenized": docs, "tokens_with_eos": tokens}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(res, f)


def main() -> None:
    run_and_report(_blocks(json.loads(sys.argv[1])), ["exact", "fuzzy"])


if __name__ == "__main__":
    main()
