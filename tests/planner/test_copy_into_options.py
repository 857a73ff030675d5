"""COPY INTO without Spark: PATTERN globs, FILES selection, option validation, the result row."""

from __future__ import annotations

import os

import pytest

import isolde
from isolde import errors as E
from isolde.executor.jobs import copy_into as C
from isolde.grammar import ast


def _matches(pattern: str, paths: list[str]) -> list[str]:
    rx = C.glob_regex(pattern)
    return [p for p in paths if rx.match(p)]


PATHS = ["a.csv", "b.csv", "ab.json", "2024/jan.csv", "2024/feb.csv", "2023/dec.csv", "x[1].csv", "deep/er/f.csv"]


def test_glob_star_and_question_stay_in_one_level():
    assert _matches("*.csv", PATHS) == ["a.csv", "b.csv", "x[1].csv"]
    assert _matches("?.csv", PATHS) == ["a.csv", "b.csv"]
    assert _matches("*/*.csv", PATHS) == ["2024/jan.csv", "2024/feb.csv", "2023/dec.csv"]
    assert _matches("*/*/*.csv", PATHS) == ["deep/er/f.csv"]


def test_glob_classes_alternatives_escapes():
    assert _matches("[ab].csv", PATHS) == ["a.csv", "b.csv"]
    assert _matches("[^a].csv", PATHS) == ["b.csv"]
    assert _matches("[!a].csv", PATHS) == ["b.csv"]
    assert _matches("{2023,2024}/[d-f]*.csv", PATHS) == ["2024/feb.csv", "2023/dec.csv"]
    assert _matches("{a,ab}.{csv,json}", PATHS) == ["a.csv", "ab.json"]
    assert _matches("x\\[1\\].csv", PATHS) == ["x[1].csv"]
    assert _matches("a.csv", ["a.csv", "aXcsv"]) == ["a.csv"]  # '.' is literal
    with pytest.raises(E.AnalysisError, match=r"unclosed '\['"):
        C.glob_regex("[ab.csv")
    with pytest.raises(E.AnalysisError, match=r"unclosed '\{'"):
        C.glob_regex("{a,b.csv")


def test_format_options_validated_case_insensitively():
    props = (ast.Property("Header", "TRUE"), ast.Property("inferSchema", "false"), ast.Property("sep", ";"),
             ast.Property("mode", "failfast"))
    assert C.format_options("CSV", props) == {"Header": "true", "inferSchema": "false", "sep": ";",
                                              "mode": "failfast"}
    with pytest.raises(E.AnalysisError, match=r"Unknown FORMAT_OPTIONS 'multiLin' .*`multiline`"):
        C.format_options("JSON", (ast.Property("multiLin", "true"),))
    with pytest.raises(E.AnalysisError, match=r"Unknown FORMAT_OPTIONS 'header' for FILEFORMAT = PARQUET"):
        C.format_options("PARQUET", (ast.Property("header", "true"),))
    with pytest.raises(E.AnalysisError, match="given twice"):
        C.format_options("CSV", (ast.Property("header", "true"), ast.Property("HEADER", "false")))
    with pytest.raises(E.AnalysisError, match="must be 'true' or 'false'"):
        C.format_options("CSV", (ast.Property("header", "1"),))
    with pytest.raises(E.AnalysisError, match="mode"):
        C.format_options("CSV", (ast.Property("mode", "strict"),))


def test_copy_options():
    assert C.copy_options(()) == {"force": False, "mergeSchema": False}
    assert C.copy_options((ast.Property("FORCE", "true"), ast.Property("mergeschema", "TRUE"))) == \
        {"force": True, "mergeSchema": True}
    with pytest.raises(E.AnalysisError, match=r"Unknown COPY_OPTIONS 'mergeSchemas'.*`mergeSchema`"):
        C.copy_options((ast.Property("mergeSchemas", "true"),))
    with pytest.raises(E.AnalysisError, match="given twice"):
        C.copy_options((ast.Property("force", "true"), ast.Property("Force", "true")))


def test_list_and_select_files(tmp_path):
    root = tmp_path / "in"
    for rel in ["a.csv", "sub/b.csv", "_SUCCESS", ".hidden.csv", "_tmp/c.csv", "sub/.d.csv"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x\n")
    got_root, files, is_dir = C.list_source(None, str(root))
    assert is_dir and got_root == str(root)
    assert [f.relative for f in files] == ["a.csv", "sub/b.csv"]
    assert files[0].key == os.path.join(str(root), "a.csv") and files[0].size == 2
    assert files[0].domain == "isolde.copyInto:" + files[0].key
    # file: URIs and relative spellings name the same files
    assert [f.key for f in C.list_source(None, "file:" + str(root))[1]] == [f.key for f in files]

    [stmt] = isolde.parse(f"COPY INTO t FROM '{root}' FILEFORMAT = CSV FILES = ('sub/b.csv', './a.csv')")
    assert [f.relative for f in C.select_files(stmt, stmt.source, files, True)] == ["sub/b.csv", "a.csv"]
    [stmt] = isolde.parse(f"COPY INTO t FROM '{root}' FILEFORMAT = CSV FILES = ('b.csv')")
    with pytest.raises(E.AnalysisError, match=r"not in .*b\.csv"):
        C.select_files(stmt, stmt.source, files, True)
    [stmt] = isolde.parse(f"COPY INTO t FROM '{root}' FILEFORMAT = CSV PATTERN = 'sub/*'")
    assert [f.relative for f in C.select_files(stmt, stmt.source, files, True)] == ["sub/b.csv"]
    with pytest.raises(E.AnalysisError, match="does not exist"):
        C.list_source(None, str(tmp_path / "missing"))


def test_result_row():
    r = C.CopyIntoResult(version=3, operation="COPY INTO", num_affected_rows=5, num_inserted_rows=5,
                         num_skipped_corrupt_files=1)
    assert r.columns == ["num_affected_rows", "num_inserted_rows", "num_skipped_corrupt_files"]
    assert r.first().num_inserted_rows == 5 and tuple(r.first()) == (5, 5, 1)
    assert r.collect() == r.rows and len(r) == 1
    from isolde.executor.session.results import CommitResult

    assert isinstance(r, CommitResult) and r.committed
