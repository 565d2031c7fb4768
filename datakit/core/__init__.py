"""The foundation every room imports: storage I/O through fsspec (`fsio`) and exact JSON (`json_exact`).

It imports nothing else from datakit, so the engine (`datakit.shuffle`), the step runner and the stages
can all stand on it without pulling each other in.
"""
