"""The stages of the pipeline, one module each, behind one contract (`contract.Stage`), walked in the
order of `registry.STAGES`. See docs/architecture.md, "Adding a stage"."""

from .contract import ATTRIBUTES, DOCUMENTS, FILES, KINDS, MODEL, SIGNATURES, TOKENIZER, TOKENS, Graph, Stage

__all__ = ["Stage", "Graph", "KINDS", "FILES", "DOCUMENTS", "SIGNATURES", "ATTRIBUTES", "TOKENIZER", "TOKENS", "MODEL"]
