"""The quality classifier's algorithms (the quality_classifier stage's room): its manifest section
(`config`), examples, fastText training, metrics and scoring (`model`), and selection by score (`select`).
A package of its own, so the quality stage's code fingerprint (the whole `datakit.quality`) stays put."""
