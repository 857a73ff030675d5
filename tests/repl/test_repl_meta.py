"""Meta-command parsing, config file, history file, progress rendering (pure, no Spark)."""

import os
import stat

import pytest

from isolde.repl import config
from isolde.repl.history import PrivateFileHistory, trim_history_file
from isolde.repl.metacommands import Meta, MetaError, help_text, parse_meta
from isolde.repl.progress import StageProgress, render_progress


@pytest.mark.parametrize("text,expected", [
    ("\\?", Meta("?")),
    ("\\dt", Meta("dt")),
    ("\\dt+", Meta("dt")),
    ("\\dt sales", Meta("dt", ("sales",))),
    ("\\d orders", Meta("d", ("orders",))),
    ("\\d  orders ;", Meta("d", ("orders",))),
    ("\\d 'my table'", Meta("d", ("my table",))),
    ("\\history orders", Meta("history", ("orders",))),
    ("\\history orders 5", Meta("history", ("orders", "5"))),
    ("\\i etl/load.sql", Meta("i", ("etl/load.sql",))),
    ("\\timing", Meta("timing")),
    ("\\timing off", Meta("timing", ("off",))),
    ("\\format csv", Meta("format", ("csv",))),
    ("\\format", Meta("format")),
    ("\\x", Meta("x")),
    ("\\conf spark.sql.shuffle.partitions 4", Meta("conf", ("spark.sql.shuffle.partitions", "4"))),
    ("\\conf spark.sql.shuffle.partitions", Meta("conf", ("spark.sql.shuffle.partitions",))),
    ("\\q", Meta("q")),
    ("quit", Meta("q")),
    ("exit;", Meta("q")),
    ("\\help", Meta("?")),
])
def test_parse_meta(text, expected):
    assert parse_meta(text) == expected


@pytest.mark.parametrize("text,message", [
    ("\\d", "usage: \\d TABLE"),
    ("\\d a b", "usage: \\d TABLE"),
    ("\\history", "usage: \\history TABLE [N]"),
    ("\\history t many", "N is a number"),
    ("\\format xml", "unknown format"),
    ("\\timing maybe", "usage: \\timing"),
    ("\\zz", "unknown meta-command \\zz"),
    ("\\", "empty meta-command"),
    ("\\i 'unterminated", "cannot parse"),
])
def test_parse_meta_errors(text, message):
    with pytest.raises(MetaError, match=None) as info:
        parse_meta(text)
    assert message in str(info.value)


def test_help_lists_every_command():
    text = help_text()
    for cmd in ("\\dt", "\\d TABLE", "\\history TABLE [N]", "\\i FILE", "\\timing", "\\format", "\\x", "\\conf",
                "\\q"):
        assert cmd in text


def test_default_config_written_once_and_parsed(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    path = config.config_path(env)
    assert path == str(tmp_path / "xdg" / "isolde" / "config")
    config.ensure_config(path)
    text = open(path).read()
    assert text == config.DEFAULT_CONFIG and text.count("\n#") > 10  # commented
    with open(path, "a") as fh:
        fh.write("\n")
    config.ensure_config(path)  # never overwritten
    assert open(path).read() == config.DEFAULT_CONFIG + "\n"
    s = config.load_settings(path)
    assert (s.format, s.pager, s.confirm_destructive, s.history_size, s.key_bindings) == \
        ("table", "less -SRXF", True, 10000, "emacs")
    assert not s.warnings


def test_config_values_and_warnings():
    s = config.parse_config("[main]\nformat = json\nkey_bindings = vi\nconfirm_destructive = no\n"
                            "history_size = 50\npager =\ntiming = off\n")
    assert (s.format, s.key_bindings, s.confirm_destructive, s.history_size, s.pager, s.timing) == \
        ("json", "vi", False, 50, "", False)
    bad = config.parse_config("[main]\nformat = xml\nkey_bindings = nano\ntiming = perhaps\n")
    assert bad.format == "table" and bad.key_bindings == "emacs" and len(bad.warnings) == 3
    assert config.parse_config("not ini at all").warnings


def test_history_file_is_private_and_trimmed(tmp_path):
    path = tmp_path / "data" / "isolde" / "history"
    h = PrivateFileHistory(str(path), max_entries=3)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for i in range(5):
        h.store_string(f"SELECT {i};\n-- two lines")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert trim_history_file(str(path), 3) == 3
    again = PrivateFileHistory(str(path), max_entries=3)
    loaded = list(again.load_history_strings())
    assert loaded[0] == "SELECT 4;\n-- two lines" and len(loaded) == 3


def test_history_tightens_a_wide_mode(tmp_path):
    path = tmp_path / "h"
    path.write_text("")
    os.chmod(path, 0o644)
    PrivateFileHistory(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_render_progress():
    stages = [StageProgress(3, "collect", 8, 5, 2)]
    line = render_progress(stages, 1.24, 80)
    assert line.startswith("[") and "5/8 tasks · stage 3 (2 running) · 1.2 s" in line
    assert len(line) < 80
    assert render_progress([], 0.5) == "running… 0.5 s"
    two = render_progress([StageProgress(1, "a", 4, 4, 0), StageProgress(2, "b", 4, 0, 2, failed=1)], 3.0, 60)
    assert "4/8 tasks · stages 1,2 (2 running) · 1 failed" in two
