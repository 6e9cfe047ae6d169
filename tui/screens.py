"""Modal screens: confirmations, the quit question, and the key help."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

QUIT_TEARDOWN = "teardown"
QUIT_DETACH = "detach"


class ConfirmScreen(ModalScreen[bool]):
    """Asks before anything destructive; dismisses with True only on an explicit yes."""

    BINDINGS = [
        Binding("y", "answer(True)", "Confirm", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "Cancel", id="confirm.no"),
    ]

    def __init__(self, question: str, confirm_label: str) -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button(f"{self.confirm_label} (y)", variant="error", id="confirm")
                yield Button("Cancel (n)", variant="primary", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class QuitScreen(ModalScreen[str | None]):
    """The job still runs: tear it down, leave it running, or stay. Dismisses with the choice."""

    BINDINGS = [
        Binding("t", "choose('teardown')", "Tear down", id="quit.teardown"),
        Binding("d", "choose('detach')", "Leave running", id="quit.detach"),
        Binding("c,escape", "choose(None)", "Cancel", id="quit.cancel"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("The job is still running. What should happen to it?", classes="question")
            with Horizontal(classes="buttons"):
                yield Button("Tear down (t)", variant="error", id="teardown")
                yield Button("Leave running (d)", variant="warning", id="detach")
                yield Button("Cancel (c)", variant="primary", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)


def help_text(bindings: list[Binding]) -> Text:
    text = Text("Keys\n\n", style="bold")
    for binding in bindings:
        keys = binding.key_display or ", ".join(binding.key.split(","))
        text.append(f"  {keys:<14}", style="bold cyan")
        text.append(f"{binding.description}\n")
    text.append("\nctrl+p opens the command palette with the same actions.", style="dim")
    return text


class HelpScreen(ModalScreen[None]):
    """Lists every dashboard binding with its description."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.listed = bindings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Static(help_text(self.listed), id="help-text")
            yield Static("esc / ? closes", classes="hint")
