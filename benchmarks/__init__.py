"""Side-by-side benchmarks against peers, each printing JSON. Run one from the repository root as
`python -m benchmarks.<name>` (see its docstring); a benchmark that runs code in a child process starts
it the same way (`benchmarks.common.module_command`), in its own venv or the peer's."""
