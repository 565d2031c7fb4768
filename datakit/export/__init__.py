"""Token caches -> the files other trainers read: Megatron-LM indexed datasets, Hugging Face `datasets`
directories, MosaicML streaming (MDS) shards and nanoGPT's flat `.bin` files.

One module per format, each a few small functions over one component's cache shards; `inputs` names
what is exported (components, their caches, weights, the steps that made them), `provenance` writes the
JSON every export carries, `run` runs a format over the components on the engine backend. The writers
need numpy and pyarrow only (both core dependencies): each format is a small documented on-disk layout,
written here and checked in tests by the format's own reader (megatron-core, datasets, streaming).
"""

from .inputs import Component, ExportRequest
from .run import FORMATS, export

__all__ = ["Component", "ExportRequest", "FORMATS", "export"]
