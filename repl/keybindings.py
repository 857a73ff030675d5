"""Key bindings: Enter submits only a complete statement (``statements.should_submit``),
Esc-Enter always inserts a newline, Tab opens completion."""

from __future__ import annotations

from prompt_toolkit.filters import completion_is_selected, has_focus, is_done
from prompt_toolkit.enums import DEFAULT_BUFFER
from prompt_toolkit.key_binding import KeyBindings

from .statements import should_submit


def repl_key_bindings() -> KeyBindings:
    kb = KeyBindings()
    focused = has_focus(DEFAULT_BUFFER) & ~is_done

    @kb.add("enter", filter=focused & ~completion_is_selected)
    def _(event):
        buf = event.current_buffer
        if should_submit(buf.text):
            buf.validate_and_handle()
        else:
            buf.insert_text("\n")

    @kb.add("enter", filter=focused & completion_is_selected)
    def _(event):
        buf = event.current_buffer
        buf.complete_state = None  # accept the highlighted completion
        # (the text is already inserted while navigating the menu)

    @kb.add("escape", "enter", filter=focused)
    def _(event):
        event.current_buffer.insert_text("\n")

    @kb.add("tab", filter=focused)
    def _(event):
        buf = event.current_buffer
        if buf.complete_state:
            buf.complete_next()
        else:
            before = buf.document.current_line_before_cursor
            if not before.strip():
                buf.insert_text("    ")
            else:
                buf.start_completion(insert_common_part=True)

    return kb
