"""The model interface: chat messages with images in, text out.

`Model.generate(messages)` is the one method an adapter implements. Messages are OpenAI-style
chat messages whose `content` is a list of parts: {"type": "text", "text": ...} and
{"type": "image", "image": PIL.Image}. `Model.answer(observation, env)` turns an environment
observation into messages (with earlier turns when the history ablation is on) and calls
`generate`; built-in policies override `answer` to read the environment instead.
"""
from __future__ import annotations


class Model:
    name = "model"

    def generate(self, messages: list[dict]) -> str:
        raise NotImplementedError

    def answer(self, observation, env) -> str:
        return self.generate(observation_messages(observation))

    def close(self) -> None:
        """Release connections or GPU memory."""


def user_message(image, text: str) -> dict:
    return {"role": "user", "content": [{"type": "image", "image": image},
                                        {"type": "text", "text": text}]}


def observation_messages(observation) -> list[dict]:
    """One user turn per state; with history, the earlier states and the model's answers."""
    messages = []
    for turn in observation.history:
        messages.append(user_message(turn.image, turn.prompt))
        messages.append({"role": "assistant",
                         "content": [{"type": "text", "text": turn.answer_text}]})
    messages.append(user_message(observation.image, observation.prompt))
    return messages
