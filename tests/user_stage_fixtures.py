"""A user stage function defined in a module of its own (a user stage's code is keyed by its module)."""


def shout(doc: dict, config: dict) -> dict:
    """A map stage: the document's text in capitals."""
    return {**doc, "text": doc["text"].upper()}
