"""The foundation every room imports: storage I/O through fsspec (`fsio`), exact JSON (`json_exact`),
the on-disk layout (`layout`), the document contract: core columns and content id (`documents`), and
package namespaces imported on first use (`lazy`).

It imports nothing else from datakit, so the engine (`datakit.shuffle`), the step runner and the stages
can all stand on it without pulling each other in.
"""
