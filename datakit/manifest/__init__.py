"""The manifest schema: typed dataclasses that are their own schema, located errors, and the loader.

This package knows no stage: each stage's config dataclass is its own section, and the stage registry
passes the sections in (`datakit.pipeline.load_manifest` is the loader users call).
"""

from datakit.manifest.errors import ManifestError, ManifestInvalid
from datakit.manifest.load import Section
from datakit.manifest.model import FORMATS, Manifest, SourceSpec, UserStageSpec

__all__ = ["FORMATS", "Manifest", "ManifestError", "ManifestInvalid", "Section", "SourceSpec", "UserStageSpec"]
