"""Read MDS directories with MosaicML streaming's own `StreamingDataset`; run by tests/test_export.py
with the Python of the separate streaming venv (`python mds_reader.py DIR...`), it prints one JSON line:
dir -> every sample's ``tokens`` in order.

`streaming/__init__.py` also imports `streaming.vision`, which loads torchvision's compiled ops; PyPI's
torchvision is built against CUDA torch and cannot load beside the CPU torch the venv uses. The reader
lives in `streaming.base`, so when the package's `__init__` fails the package is entered without it:
`streaming.base` and everything it imports are then the library's own code, unchanged.
"""

import importlib.util
import json
import sys
import types

import numpy as np


def _streaming_dataset():
    try:
        from streaming import StreamingDataset
    except (ImportError, RuntimeError, OSError):
        for name in [m for m in sys.modules if m == "streaming" or m.startswith(("streaming.", "torchvision"))]:
            del sys.modules[name]
        spec = importlib.util.find_spec("streaming")
        package = types.ModuleType("streaming")
        package.__path__, package.__spec__ = list(spec.submodule_search_locations), spec
        sys.modules["streaming"] = package
        from streaming.base import StreamingDataset
    return StreamingDataset


if __name__ == "__main__":
    dataset = _streaming_dataset()
    print(json.dumps({d: [np.asarray(s["tokens"]).tolist() for s in dataset(local=d, shuffle=False, batch_size=1)]
                      for d in sys.argv[1:]}))
