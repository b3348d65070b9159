"""The model interface: chat messages with images in, text out.

`Model.generate(messages)` is the one method an adapter implements. Messages are OpenAI-style
chat messages whose `content` is a list of parts: {"type": "text", "text": ...} and
{"type": "image", "image": PIL.Image}. `Model.answer(observation, env)` turns an environment
observation into messages (with earlier turns when the history ablation is on) and calls
`generate`; built-in policies override `answer` to read the environment instead.
"""
from __future__ import annotations

import base64
import io
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request


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


# ---- OpenAI-compatible chat completions (vLLM, TGI, hosted APIs) -----------------------------



class ModelError(RuntimeError):
    """The endpoint failed after every retry, or answered something unusable."""


def image_data_url(image) -> str:
    """A PIL image as a base64 PNG data URL (lossless, so the model sees our exact pixels)."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def to_openai_messages(messages: list[dict]) -> list[dict]:
    converted = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            converted.append({"role": message["role"], "content": content})
            continue
        parts = []
        for part in content:
            if part["type"] == "image":
                parts.append({"type": "image_url",
                              "image_url": {"url": image_data_url(part["image"])}})
            else:
                parts.append({"type": "text", "text": part["text"]})
        converted.append({"role": message["role"], "content": parts})
    return converted


class OpenAIChatModel(Model):
    """POST {base_url}/chat/completions. Retries timeouts, connection errors, 429 and 5xx with
    exponential backoff; at most `max_concurrency` requests in flight across threads."""

    RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}

    def __init__(self, model: str, base_url: str = "http://localhost:8000/v1",
                 api_key: str | None = None, timeout: float = 60.0, max_retries: int = 3,
                 backoff: float = 0.5, max_tokens: int = 50, temperature: float = 0.0,
                 max_concurrency: int = 8, extra_body: dict | None = None):
        self.name = model
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.max_tokens, self.temperature = max_tokens, temperature
        self.extra_body = extra_body or {}
        self._slots = threading.BoundedSemaphore(max_concurrency)

    def _payload(self, messages: list[dict]) -> bytes:
        body = {"model": self.model, "messages": to_openai_messages(messages),
                "max_tokens": self.max_tokens, "temperature": self.temperature}
        body.update(self.extra_body)
        return json.dumps(body).encode("utf-8")

    def _post(self, payload: bytes) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read().decode("utf-8"))

    def generate(self, messages: list[dict]) -> str:
        payload = self._payload(messages)
        last_error = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                with self._slots:
                    reply = self._post(payload)
                return reply["choices"][0]["message"]["content"] or ""
            except urllib.error.HTTPError as err:
                if err.code not in self.RETRY_STATUS:
                    raise ModelError(f"{self.url}: HTTP {err.code}") from err
                last_error = err
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as err:
                last_error = err
            except (KeyError, IndexError, ValueError) as err:
                raise ModelError(f"{self.url}: malformed reply: {err}") from err
        raise ModelError(f"{self.url}: failed after {self.max_retries + 1} attempts: "
                         f"{last_error}") from last_error


# ---- Hugging Face transformers (the optional `transformers` extra) ---------------------------

# The distribution is installed from its checkout (it is on no package index), so the advice
# names the extra the way a checkout installs it, and the plain packages for any other install.
TRANSFORMERS_MISSING = ("the hf: adapter needs transformers and torch: from the project's "
                        "checkout run `pip install -e \".[transformers]\"` (or `pip install "
                        "transformers torch`)")


class TransformersModel(Model):
    """A local image-text-to-text model; transformers and torch are imported on first use."""

    def __init__(self, model_id: str, max_new_tokens: int = 50, device_map: str = "auto"):
        self.name = model_id
        self.model_id, self.max_new_tokens, self.device_map = model_id, max_new_tokens, device_map
        self._model = self._processor = None

    def _load(self):
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForImageTextToText, AutoProcessor
        except ImportError as err:
            raise ModelError(TRANSFORMERS_MISSING) from err
        self._processor = AutoProcessor.from_pretrained(self.model_id)
        self._model = AutoModelForImageTextToText.from_pretrained(
            self.model_id, device_map=self.device_map, torch_dtype="auto")

    def generate(self, messages: list[dict]) -> str:
        if self._model is None:
            self._load()
        images = [p["image"].convert("RGB") for m in messages if isinstance(m["content"], list)
                  for p in m["content"] if p["type"] == "image"]
        chat = [{"role": m["role"], "content": [{"type": "image"} if p["type"] == "image"
                                                 else p for p in m["content"]]}
                for m in messages]
        text = self._processor.apply_chat_template(chat, add_generation_prompt=True)
        inputs = self._processor(images=images or None, text=[text], return_tensors="pt")
        inputs = inputs.to(self._model.device)
        output = self._model.generate(**inputs, max_new_tokens=self.max_new_tokens,
                                      do_sample=False)
        new_tokens = output[0][inputs["input_ids"].shape[1]:]
        return self._processor.decode(new_tokens, skip_special_tokens=True)
