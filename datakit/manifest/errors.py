"""Located manifest errors: what the user reads when a manifest is wrong."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ManifestError:
    """One problem in a manifest, located: str() is ``file:line:column: field: message``."""

    file: str
    line: int | None
    column: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ManifestInvalid(ValueError):
    """Raised by `load_manifest` with every error found; str() is one error per line."""

    def __init__(self, errors: list[ManifestError]):
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))
