"""A conversation: what one entry of a prompt source sends, turn by turn.

A fixed prompt or random words is a conversation of one turn; a dataset row may have
several (MT-Bench, Spec-Bench, ShareGPT).  Each turn is its own request, sent once the
previous one has ended, and carries the earlier turns with the answers the server streamed
to them, so a second turn is measured with the context a real chat would give it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence


class Message(NamedTuple):
    role: str  # system, user or assistant
    content: str


@dataclass(frozen=True)
class Conversation:
    turns: tuple[str, ...]  # the user turns, in the order they are sent
    context: tuple[Message, ...] = ()  # sent as written before the first turn: a system prompt, an earlier exchange
    category: str | None = None  # the dataset's label of this row (code, prose, ...)
    max_tokens: int | None = None  # replaces workload.max_tokens for this conversation's requests
    row: int | None = None  # its position among the dataset's rows (0-based); None when not from a dataset
    intended_prompt_tokens: int | None = None  # random words sized to workload.input_len: the length meant

    def messages(self, turn: int, answers: Sequence[str]) -> list[dict[str, str]]:
        """The chat messages of request ``turn``: the context, each earlier turn followed
        by the answer the server gave it (``answers``), then this turn."""
        if len(answers) < turn:
            raise ValueError(f"turn {turn} needs the answers of the {turn} turns before it, got {len(answers)}")
        messages = [m._asdict() for m in self.context]
        for asked, answered in zip(self.turns[:turn], answers):
            messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
        messages.append({"role": "user", "content": self.turns[turn]})
        return messages


def as_text(messages: Sequence[dict[str, str]]) -> str:
    """A chat as one prompt for the text APIs (completions, generate): the contents in
    order, a blank line between them, no role markers (a chat template is the server's
    business, and the text APIs have none).  One user message is its text alone."""
    return "\n\n".join(m["content"] for m in messages)
