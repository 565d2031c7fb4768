"""datakit: pretraining data pipelines, from manifest to trained model."""
__version__ = "0.1.0"
