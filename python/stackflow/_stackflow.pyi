"""Type stub of the compiled core, ``stackflow._stackflow`` (python/src/lib.rs)."""

from typing import Any, List, Tuple

__version__: str

class Error(Exception):
    """Bad input, or a command that could not run: the message names the file, field path,
    value and what was expected, as the command line's error does."""

def run(args: List[str], files: List[Tuple[str, str]] = ...) -> Tuple[int, Any]:
    """Runs ``stackflow ARGS`` (ending with ``--json``) in-process with ``files`` (name, YAML or
    JSON text) held in memory under their names; returns (exit code, the ``--json`` answer):
    0 done, 2 a failed validation, 3 nothing feasible. Raises :class:`Error` on bad input."""

def flags(command: str) -> List[str]:
    """The long flags of a subcommand, as the command line spells them (without ``--``)."""

def result_columns() -> List[str]:
    """The columns of a sweep's results.csv after ``index`` and the axes, in order."""
