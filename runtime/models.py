"""The model interface: chat messages with images in, text out.

`Model.generate(messages)` is the one method an adapter implements. Messages are OpenAI-style
chat messages whose `content` is a list of parts: {"type": "text", "text": ...} and
{"type": "image", "image": PIL.Image}. `Model.answer(observation, env)` turns an environment
observation into messages (with earlier turns when the history ablation is on) and calls
`generate`; built-in policies override `answer` to read the environment instead.
"""
from __future__ import annotations

import base64
import http.client
import io
import json
import os
import socket
import threading
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

    def cancel(self) -> None:
        """Stop what is in flight at once (the run is stopping); a no-op where nothing waits
        on the network."""


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


class Cancelled(ModelError):
    """The run was stopped (Ctrl-C, SIGTERM) while a request was in flight or waiting."""


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


# A chat reply is a few kilobytes (max_tokens is small); an endpoint answering more is refused
# unread beyond this, so memory never depends on what it sends.
MAX_REPLY_BYTES = 8 << 20


def reply_text(body: bytes) -> str:
    """The assistant's text in a chat-completions reply body; ModelError for anything else (not
    JSON, not an object, no choices, content that is not text)."""
    try:
        reply = json.loads(body.decode("utf-8"))
    except RecursionError:
        raise ModelError("malformed reply: nested too deeply") from None
    except ValueError as err:  # not UTF-8, not JSON
        raise ModelError(f"malformed reply: not JSON ({str(err)[:100]})") from None
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as err:
        raise ModelError(f"malformed reply: no choices[0].message.content "
                         f"({type(err).__name__}: {str(err)[:100]})") from None
    if content is None:
        return ""
    if isinstance(content, list):  # some servers answer a list of text parts
        if all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
            return "".join(p["text"] for p in content)
    if not isinstance(content, str):
        kind = ("true/false" if isinstance(content, bool) else "a number"
                if isinstance(content, (int, float)) else "an object"
                if isinstance(content, dict) else "a list")
        raise ModelError(f"malformed reply: message content is {kind}, not text")
    return content


def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Deadline:
    """Ends one request at a fixed time, whatever it is doing: the sockets it opened are shut
    down when the time is up. (A socket timeout bounds each read only: a reply trickling one
    byte a second would never end.) Expired early by `OpenAIChatModel.cancel`."""

    def __init__(self, seconds: float):
        self._lock = threading.Lock()
        self._sockets: list = []
        self.expired = False
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def watch(self, sock) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def stop(self) -> None:
        self._timer.cancel()


def _watched(connection_class, deadline: _Deadline):
    """`connection_class` whose sockets `deadline` shuts down (its TLS handshake included)."""
    class Watched(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            create = self._create_connection

            def create_watched(*a, **k):
                sock = create(*a, **k)
                deadline.watch(sock)
                return sock
            self._create_connection = create_watched
    return Watched


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.deadline), req,
                            context=self._context)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the request (and its API key) goes to the named endpoint only."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class OpenAIChatModel(Model):
    """POST {base_url}/chat/completions. Retries timeouts, connection errors, 429 and 5xx with
    exponential backoff; at most `max_concurrency` requests in flight across threads.

    Each request must end within `timeout` seconds in all (connecting, sending, the whole reply),
    and its reply may hold at most MAX_REPLY_BYTES. Redirects are not followed (the API key
    would go with them). A reply that is not a chat completion with text content is a
    ModelError, never retried. `cancel()` ends requests in flight and every later one at once."""

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
        self._cancelled = threading.Event()
        self._active: set[_Deadline] = set()
        self._active_lock = threading.Lock()

    def _payload(self, messages: list[dict]) -> bytes:
        body = {"model": self.model, "messages": to_openai_messages(messages),
                "max_tokens": self.max_tokens, "temperature": self.temperature}
        body.update(self.extra_body)
        return json.dumps(body).encode("utf-8")

    def _post(self, payload: bytes) -> bytes:
        """The reply body of one request (at most MAX_REPLY_BYTES + 1 bytes are read)."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
        deadline = _Deadline(self.timeout)
        with self._active_lock:
            self._active.add(deadline)
        if self._cancelled.is_set():
            deadline.expire()
        deadline.start()
        opener = urllib.request.build_opener(_NoRedirects, _HTTPHandler(deadline),
                                             _HTTPSHandler(deadline))
        try:
            with opener.open(request, timeout=self.timeout) as response:
                body = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError:
            raise
        except (OSError, http.client.HTTPException) as err:
            if deadline.expired:
                raise TimeoutError(f"no complete reply within {self.timeout:g} s") from err
            raise
        finally:
            deadline.stop()
            with self._active_lock:
                self._active.discard(deadline)
        if deadline.expired:  # the reply was cut short when the time was up
            raise TimeoutError(f"no complete reply within {self.timeout:g} s")
        if len(body) > MAX_REPLY_BYTES:
            raise ModelError(f"{self.url}: the reply is larger than {MAX_REPLY_BYTES:,} bytes "
                             "(refused unread beyond that)")
        return body

    def generate(self, messages: list[dict]) -> str:
        payload = self._payload(messages)
        last_error = None
        for attempt in range(self.max_retries + 1):
            if attempt and self._cancelled.wait(self.backoff * 2 ** (attempt - 1)):
                break
            if self._cancelled.is_set():
                break
            try:
                with self._slots:
                    body = self._post(payload)
            except urllib.error.HTTPError as err:
                err.close()
                if 300 <= err.code < 400:
                    raise ModelError(f"{self.url}: HTTP {err.code} redirect to "
                                     f"{err.headers.get('Location')!r}: redirects are not "
                                     "followed (the request and its API key go to the named "
                                     "endpoint only); give the final URL") from None
                if err.code not in self.RETRY_STATUS:
                    raise ModelError(f"{self.url}: HTTP {err.code}") from None
                last_error = err
                continue
            except (OSError, http.client.HTTPException) as err:
                last_error = err
                continue
            try:
                return reply_text(body)
            except ModelError as err:
                raise ModelError(f"{self.url}: {err}") from None
        if self._cancelled.is_set():
            raise Cancelled(f"{self.url}: stopped")
        raise ModelError(f"{self.url}: failed after {self.max_retries + 1} attempts: "
                         f"{last_error}") from last_error

    def cancel(self) -> None:
        """End every request in flight now, and refuse the next ones (the run is stopping)."""
        self._cancelled.set()
        with self._active_lock:
            active = list(self._active)
        for deadline in active:
            deadline.expire()


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
        try:
            self._processor = AutoProcessor.from_pretrained(self.model_id)
            self._model = AutoModelForImageTextToText.from_pretrained(
                self.model_id, device_map=self.device_map, torch_dtype="auto")
        except Exception as err:  # noqa: BLE001 (no network, no such model, not a VLM, ...)
            detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise ModelError(f"hf:{self.model_id} cannot be loaded ({type(err).__name__}"
                             f"{': ' + detail[:200] if detail else ''})") from None

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
