"""Persistent REPL history: prompt-toolkit's FileHistory, kept private (mode 0600) and
trimmed to the configured number of entries."""

from __future__ import annotations

import os

from prompt_toolkit.history import FileHistory


def _private_append(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


class PrivateFileHistory(FileHistory):
    """FileHistory whose file is created with mode 0600 (and tightened if it was wider)."""

    def __init__(self, filename: str, max_entries: int = 10000):
        directory = os.path.dirname(os.path.abspath(filename))
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not os.path.exists(filename):
            _private_append(filename, "")
        try:
            if os.stat(filename).st_mode & 0o077:
                os.chmod(filename, 0o600)
        except OSError:
            pass
        self.max_entries = max_entries
        super().__init__(filename)
        trim_history_file(filename, max_entries)

    def store_string(self, string: str) -> None:
        import datetime

        lines = [f"\n# {datetime.datetime.now()}\n"] + [f"+{line}\n" for line in string.split("\n")]
        _private_append(str(self.filename), "".join(lines))


def trim_history_file(path: str, max_entries: int) -> int:
    """Keep the newest ``max_entries`` entries of a FileHistory file; returns how many remain."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return 0
    entries: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("#"):
            current = [line]
            entries.append(current)
        elif line.startswith("+"):
            if current is None:
                current = []
                entries.append(current)
            current.append(line)
        else:
            current = None
    entries = [e for e in entries if any(x.startswith("+") for x in e)]
    if len(entries) <= max_entries:
        return len(entries)
    keep = entries[-max_entries:] if max_entries > 0 else []
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for e in keep:
            fh.write("\n" + "".join(e))
    os.replace(tmp, path)
    return len(keep)
