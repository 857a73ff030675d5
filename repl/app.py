"""The interactive REPL (prompt-toolkit): prompt at once, Spark in the background,
multi-line statements, completion, highlighting, history, meta-commands, and a loop
that survives anything."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from . import metacommands, statements
from .completion import CatalogCache, make_completer
from .config import Settings, history_path
from .prompt import prompt_text
from .runner import Runner, SessionHolder

BANNER = "isolde {version} · Spark is starting in the background · \\? for help, \\q to quit"


class Repl:
    def __init__(self, holder: SessionHolder, settings: Settings, *, input: Any = None, output: Any = None,
                 stdout: Any = None, history: Any = None, color: bool | None = None):
        from prompt_toolkit import PromptSession
        from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
        from prompt_toolkit.history import InMemoryHistory

        from .highlight import prompt_lexer, prompt_style
        from .keybindings import repl_key_bindings

        self.holder = holder
        self.settings = settings
        self.stdout = stdout or sys.stdout
        if color is None:
            color = settings.color and not os.environ.get("NO_COLOR") and self.stdout.isatty()
        self.color = color
        self.exit_requested = False
        # completion's names come from the log: usable as soon as the Session object exists
        self.catalog = CatalogCache(lambda: self.holder.peek() or self.holder.offline(timeout=0))
        holder.on_constructed.append(lambda _session: self.catalog.refresh())
        holder.on_ready.append(lambda _session: self.catalog.refresh())
        if history is None:
            try:
                from .history import PrivateFileHistory

                history = PrivateFileHistory(history_path(settings), settings.history_size)
            except OSError:
                history = InMemoryHistory()
        self.runner = Runner(holder, settings, self.stdout, self.stdout, interactive=True, color=color,
                             on_error="stop", confirm=self._confirm, progress=self.stdout.isatty(),
                             pager=True, on_ddl=self.catalog.refresh)
        self.prompt_session = PromptSession(
            message=self._message,
            multiline=True,
            prompt_continuation=self._continuation,
            lexer=prompt_lexer() if color else None,
            style=prompt_style(),
            include_default_pygments_style=False,
            completer=make_completer(self.catalog),
            complete_while_typing=False,
            auto_suggest=AutoSuggestFromHistory(),
            history=history,
            key_bindings=repl_key_bindings(),
            vi_mode=settings.key_bindings == "vi",
            enable_history_search=False,
            color_depth=None,
            input=input,
            output=output,
        )

    # ------------------------------------------------------------------ prompt

    def _database(self) -> str:
        session = self.holder.peek()
        db = getattr(session, "current_database", None) if session is not None else None
        return str(db) if db and db != "default" else ""

    def _message(self):
        session = self.holder.peek()
        tables = getattr(session, "transaction_tables", None) if session is not None else None
        return [("class:prompt", prompt_text(self._database(), tables if isinstance(tables, list) else None))]

    def _continuation(self, width: int, line_number: int, is_soft_wrap: bool):
        return [("class:continuation", " " * max(width - 3, 0) + "-> ")]

    def _confirm(self, question: str) -> bool:
        from prompt_toolkit import PromptSession

        try:
            answer = PromptSession(input=self.prompt_session.input, output=self.prompt_session.output).prompt(
                f"{question} [y/N] ")
        except (KeyboardInterrupt, EOFError):
            return False
        return answer.strip().lower() in ("y", "yes")

    # ------------------------------------------------------------------ meta-command context

    def echo(self, text: str = "") -> None:
        self.runner.echo(text)

    def session(self) -> Any:
        return self.runner.session()

    def catalog_session(self) -> Any:
        return self.runner.catalog_session()

    def run_text(self, text: str, source: Optional[str] = None) -> bool:
        return self.runner.run_text(text, source=source)

    def request_exit(self) -> None:
        self.exit_requested = True

    # ------------------------------------------------------------------ loop

    def handle(self, text: str) -> None:
        """One submitted buffer: a meta-command, or statements run in order."""
        if not text.strip():
            return
        if statements.is_meta(text):
            try:
                meta = metacommands.parse_meta(text)
                metacommands.run_meta(meta, self)
            except metacommands.MetaError as exc:
                self.runner.show_error_text(str(exc))
            return
        self.runner.run_text(text)

    def run(self) -> int:
        import isolde

        self.echo(BANNER.format(version=isolde.__version__))
        # Spark (and the executor's imports) start once the first prompt is on the screen, so
        # the background thread does not compete for the GIL with drawing it.
        app = self.prompt_session.app

        def start_spark(_app=None) -> None:
            app.after_render.remove_handler(start_spark)
            self.holder.start_background()

        app.after_render.add_handler(start_spark)
        prompt_failures = 0
        while not self.exit_requested:
            try:
                text = self.prompt_session.prompt()
                prompt_failures = 0
            except KeyboardInterrupt:
                continue  # Ctrl-C clears the input
            except EOFError:
                break  # Ctrl-D on an empty line
            except Exception as exc:  # noqa: BLE001 - a bug in the editor: report, keep going
                self.runner.show_error(exc)
                prompt_failures += 1
                if prompt_failures >= 5:  # the terminal itself is gone or unusable
                    self.echo("The prompt keeps failing; leaving.")
                    return 1
                continue
            try:
                self.handle(text)
            except KeyboardInterrupt:
                self.echo("Cancelled.")
            except SystemExit:
                break
            except BaseException as exc:  # noqa: BLE001 - the loop never dies
                self.runner.show_error(exc)
        session = self.holder.peek()
        if session is not None and getattr(session, "transaction_tables", None) is not None:
            self.echo(session.roll_back_open_transaction("the REPL closed"))
        self.echo("Bye.")
        return 0
