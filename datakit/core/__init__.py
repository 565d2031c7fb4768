"""The foundation every room imports: the one way to the store (`fsio`: every read, write, exclusive
create, append, removal and listing, retried), the one listing of data inputs (`listing`, walking local
folders under its symlink rules with `walk`), exact JSON (`json_exact`), the on-disk layout (`layout`),
the document contract: core columns and content id (`documents`), and package namespaces imported on
first use (`lazy`).

It imports nothing else from datakit, so the engine (`datakit.shuffle`), the step runner and the stages
can all stand on it without pulling each other in.
"""
