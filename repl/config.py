"""The REPL configuration file: ``$XDG_CONFIG_HOME/isolde/config`` (default
``~/.config/isolde/config``), INI syntax, written with comments on first run."""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, field

from .formatting import FORMATS

DEFAULT_CONFIG = """\
# isolde REPL configuration.
# This file was written on first run; edit it freely (INI syntax, '#' starts a comment).
# Command-line options (--format ...) override it for one run.

[main]
# Output format for query results: table, csv, json, vertical or markdown.
# Switch at run time with \\format NAME (and \\x toggles vertical).
format = table

# Pager for results taller than the terminal. Empty: never page.
# The default keeps colours (-R), does not wrap long lines (-S), and quits when the
# output fits on one screen (-F) without clearing it (-X). $PAGER is not used.
pager = less -SRXF

# Ask before DELETE or UPDATE without a WHERE clause (they change every row).
confirm_destructive = true

# Show the elapsed time after each statement (toggle with \\timing).
timing = true

# Lines kept in the history file (oldest dropped first).
history_size = 10000

# History file; "default" means $XDG_DATA_HOME/isolde/history
# (~/.local/share/isolde/history). It is created with mode 0600.
history_file = default

# Key bindings: emacs or vi.
key_bindings = emacs

# The REPL shows at most this many rows of a query (0: all of them). Scripts, -e and
# stdin always print every row.
max_rows = 10000

# Syntax highlighting and coloured errors on a terminal: true or false.
# (Output to a pipe is always plain. NO_COLOR in the environment also turns colours off.)
color = true

# Fit wide DESCRIBE HISTORY results and the result rows of writes (OPTIMIZE, RESTORE, ...)
# into the terminal's width: the widest columns are cut or left out, with a note saying
# which. \\x (vertical display) shows every column in full; false: never fit (the pager
# scrolls sideways instead).
fit_width = true

# Show a Spark progress bar (stages and tasks) for statements running longer than this
# many seconds. Negative: never.
progress_after = 0.5

# Once Spark is up, run isolde's statements on a small throwaway table in the background
# (a few seconds of CPU) so your first UPDATE / DELETE / MERGE runs at warm speed. A statement
# you type never waits for it: the warm-up is cancelled first.
warm_up = true
"""


@dataclass
class Settings:
    format: str = "table"
    pager: str = "less -SRXF"
    confirm_destructive: bool = True
    timing: bool = True
    history_size: int = 10000
    history_file: str = "default"
    key_bindings: str = "emacs"
    color: bool = True
    progress_after: float = 0.5
    max_rows: int = 10000
    fit_width: bool = True
    expanded: bool = False
    warm_up: bool = True
    warnings: list = field(default_factory=list)

    @property
    def effective_format(self) -> str:
        return "vertical" if self.expanded else self.format


def config_dir(env: dict | None = None) -> str:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "isolde")


def config_path(env: dict | None = None) -> str:
    return os.path.join(config_dir(env), "config")


def data_dir(env: dict | None = None) -> str:
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "isolde")


def history_path(settings: Settings, env: dict | None = None) -> str:
    if settings.history_file and settings.history_file != "default":
        return os.path.expanduser(settings.history_file)
    return os.path.join(data_dir(env), "history")


def ensure_config(path: str | None = None) -> str:
    """Write the commented default config if it does not exist; return its path."""
    path = path or config_path()
    if not os.path.exists(path):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(DEFAULT_CONFIG)
        except OSError:
            pass  # a read-only home must not stop the REPL
    return path


def parse_config(text: str) -> Settings:
    """Settings from config text; bad values keep their default and add a warning."""
    settings = Settings()
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#",))
    try:
        parser.read_string(DEFAULT_CONFIG)
        parser.read_string(text)
    except configparser.Error as exc:
        settings.warnings.append(f"config: {exc}")
        return settings
    main = parser["main"]

    def get_bool(key: str) -> None:
        try:
            setattr(settings, key, main.getboolean(key))
        except ValueError:
            settings.warnings.append(f"config: {key} must be true or false, not {main.get(key)!r}")

    fmt = main.get("format", "table").strip().lower()
    if fmt in FORMATS:
        settings.format = fmt
    else:
        settings.warnings.append(f"config: unknown format {fmt!r} (use one of {', '.join(FORMATS)})")
    settings.pager = main.get("pager", settings.pager).strip()
    for key in ("confirm_destructive", "timing", "color", "fit_width", "warm_up"):
        get_bool(key)
    try:
        settings.history_size = max(0, main.getint("history_size"))
    except ValueError:
        settings.warnings.append("config: history_size must be a number")
    try:
        settings.max_rows = max(0, main.getint("max_rows"))
    except ValueError:
        settings.warnings.append("config: max_rows must be a number")
    try:
        settings.progress_after = main.getfloat("progress_after")
    except ValueError:
        settings.warnings.append("config: progress_after must be a number of seconds")
    settings.history_file = main.get("history_file", "default").strip() or "default"
    kb = main.get("key_bindings", "emacs").strip().lower()
    if kb in ("emacs", "vi"):
        settings.key_bindings = kb
    else:
        settings.warnings.append(f"config: key_bindings must be emacs or vi, not {kb!r}")
    return settings


def load_settings(path: str | None = None, create: bool = True) -> Settings:
    path = path or config_path()
    if create:
        ensure_config(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        text = ""
    return parse_config(text)
