"""The ``isolde`` command line.

    isolde                          the REPL (stdin is a terminal)
    isolde -f a.sql [-f b.sql]      run scripts          isolde -e "SQL; SQL"   run statements
    ... | isolde                    statements from stdin (not a terminal)
    isolde --default-script examples/quickstart.sql --echo
                                    the REPL on a terminal; otherwise run that script
                                    (echoing each statement before its result)

Exit codes: 0 success, 1 a statement failed (message on stderr naming the script line),
2 usage error (before Spark starts). Nothing here imports pyspark: Spark is started by
``isolde.connect`` only when a statement needs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FORMATS = ("table", "csv", "json", "vertical", "markdown")


class _Source(argparse.Action):
    """-e / -f keep their command-line order in one list."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, "sources", None) or [])
        items.append(("file" if option_string in ("-f", "--file") else "sql", values))
        namespace.sources = items


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 2, as argparse does, but without the full usage noise
        self.print_usage(sys.stderr)
        sys.stderr.write(f"isolde: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="isolde",
        description="SQL for ACID Delta Lake tables on Apache Spark: a REPL, a script runner and a command line.",
        epilog="Exit codes: 0 success, 1 a statement failed, 2 usage error.",
    )
    p.add_argument("-e", "--execute", metavar="SQL", action=_Source, dest="sources",
                   help="run these ';'-separated statements (repeatable; in order with -f)")
    p.add_argument("-f", "--file", metavar="FILE", action=_Source, dest="sources",
                   help="run the statements of a .sql file ('-' for stdin; repeatable)")
    p.add_argument("--warehouse", metavar="DIR", default=None,
                   help="warehouse directory for named tables (default: $ISOLDE_WAREHOUSE or ./warehouse)")
    p.add_argument("--master", metavar="URL", default=None,
                   help="Spark master URL (default: $ISOLDE_SPARK_MASTER or local[*])")
    p.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[],
                   help="a Spark / isolde configuration setting (repeatable)")
    p.add_argument("--format", choices=FORMATS, default=None, help="output format for query results")
    p.add_argument("--on-error", choices=("stop", "continue"), default="stop",
                   help="after a failed statement: stop (default) or continue with the next one")
    p.add_argument("--timing", action="store_true", help="print the elapsed time after each statement")
    p.add_argument("--echo", action="store_true", help="scripts: print each statement before its result")
    p.add_argument("--default-script", metavar="FILE", default=None,
                   help="when stdin is not a terminal and no -e/-f is given, run FILE instead of reading stdin "
                        "(on a terminal: the REPL)")
    p.add_argument("--no-config", action="store_true", help="ignore (and do not create) the config file")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def _version() -> str:
    import isolde

    try:
        from importlib.metadata import version

        spark = version("pyspark")
    except Exception:
        spark = "?"
    return f"isolde {isolde.__version__} (pyspark {spark}, python {sys.version.split()[0]})"


def _parse_conf(items: Sequence[str]) -> dict:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    if args.version:
        print(_version())
        return EXIT_OK
    try:
        conf = _parse_conf(args.conf)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"isolde: error: {exc}\n")
        return EXIT_USAGE

    sources = list(getattr(args, "sources", None) or [])
    stdin_tty = _isatty(sys.stdin)
    if not sources and not stdin_tty and args.default_script:
        sources = [("file", args.default_script)]
    # read every script before Spark starts: a missing file is a usage error
    loaded: list[tuple[str | None, str]] = []
    for kind, value in sources:
        if kind == "sql":
            loaded.append((None, value))
            continue
        try:
            if value == "-":
                loaded.append(("<stdin>", sys.stdin.read()))
            else:
                with open(value, encoding="utf-8") as fh:
                    loaded.append((value, fh.read()))
        except OSError as exc:
            sys.stderr.write(f"isolde: error: cannot read {value}: {exc.strerror or exc}\n")
            return EXIT_USAGE

    from .config import Settings, load_settings

    settings = Settings() if args.no_config else load_settings()
    for warning in settings.warnings:
        sys.stderr.write(f"isolde: {warning}\n")
    if args.format:
        settings.format = args.format
    connect_kwargs = {"warehouse": args.warehouse or os.environ.get("ISOLDE_WAREHOUSE") or "./warehouse",
                      "master": args.master, "conf": conf or None}

    from .runner import Runner, SessionHolder

    holder = SessionHolder(connect_kwargs)

    if not loaded and stdin_tty:
        from .app import Repl

        holder.warm_up = settings.warm_up  # the user is typing: warm the JVM up meanwhile

        if args.timing:
            settings.timing = True
        try:
            return Repl(holder, settings).run()
        finally:
            holder.close()

    if not loaded:
        loaded = [(None, sys.stdin.read())]
    # scripts: plain output, no progress, no colours; timing only on request
    settings.timing = bool(args.timing)
    runner = Runner(holder, settings, sys.stdout, sys.stderr, interactive=False, color=False,
                    on_error=args.on_error)
    runner.echo_statements = bool(args.echo)
    try:
        for source, text in loaded:
            ok = runner.run_text(text, source=source or ("<stdin>" if not sources else "-e"))
            if not ok and args.on_error == "stop":
                break
    except KeyboardInterrupt:
        sys.stderr.write("isolde: interrupted\n")
        return 130
    finally:
        holder.close()
    return EXIT_FAILED if runner.failures else EXIT_OK


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
