"""The quality layer's algorithms: pure functions over one document's text that return measured values
(language ID, Gopher quality and repetition, C4, FineWeb, URL lists, PII redaction, line/paragraph
dedup keys). Each is usable on its own; the stages in `datakit.stages.quality`, `.linededup` and `.pii`
run them on the engine. Rules compare a measure with a threshold in `datakit.quality.rules`, so a
measure stored as an attribute can be re-thresholded later without recomputing it.
"""
