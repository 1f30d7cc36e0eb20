"""The ``openai`` summarizer: any OpenAI-compatible chat-completions endpoint (OpenAI,
Azure OpenAI, Ollama, vLLM, a llama.cpp server) through the official ``openai`` SDK.

The API key is read from the environment variable the config names, at call time (a
rotated key is used from the next call on), and never put in a record, a log line, a
repr or an error message: an SDK error is reported by its type and HTTP status alone,
and raised without the SDK's exception attached (its request carries the key and its
body may echo it). The endpoint is named without any user, password or query string.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ctxwindow import LLMUsage, SummaryRequest, SummaryResult
from ctxwindow.errors import CtxWindowError, LLMNotConfigured
from ctxwindow_summarize.errors import SummarizerFailed

OPENAI_URL = "https://api.openai.com/v1"
SYSTEM_PROMPT = (
    "You keep the running memory of a conversation, or of an agent's work, for an "
    "assistant. Rewrite the previous summary together with the new messages into one "
    "updated summary. Its first sentence says what it covers (for example: 'Covers the "
    "first 40 messages: the user's booking change and six tool calls.'). Then keep, in "
    "this order: the user's task and constraints, in the user's own words where short; "
    "the decisions made and actions taken, with their outcomes; the open items, and "
    "what is still pending; and every identifier later steps may need (ids, names, "
    "dates, amounts, numbers, file paths) exactly as written. Collapse repeated tool "
    "calls into one line each. Drop greetings, small talk and tool output nobody used. "
    "Write plain sentences with no preamble, at most {words} words."
)
#: Replies that are plainly not a summary: refusals, error pages and status lines, by
#: how they begin. Anchored: the strategy checks every summarizer's reply, and a summary
#: of a chat about an API may well mention a rate limit or an internal server error.
_ERROR_TEXT = re.compile(
    r"^\s*(error\b|i'?m sorry|i am sorry|i cannot|i can'?t|as an ai\b|<!doctype|<html|"
    r"\{\s*\"error\"|(\d{3}\s+)?(rate limit|too many requests|internal server error|"
    r"bad gateway|service unavailable|gateway time-?out)\b)",
    re.IGNORECASE,
)


def looks_like_error(text: str) -> bool:
    """Whether a summarizer's reply is empty or plainly error text, not a summary."""
    return not text.strip() or bool(_ERROR_TEXT.match(text))


class OpenAISummarizer:
    """Summarizes with a chat model; timeouts and retries are the SDK's own."""

    requires_llm = True

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 30.0,
        retries: int = 2,
        provider: str | None = None,
        max_input_tokens: int = 6_000,
    ) -> None:
        if not model:
            raise LLMNotConfigured(
                "the openai summarizer needs a model: llm_model = '<name>' (or the "
                "summarizer 'openai:<name>')"
            )
        self.model = model
        self.base_url = (base_url or OPENAI_URL).rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.retries = retries
        self.max_input_tokens = max_input_tokens
        self.provider = provider or (
            "openai" if self.base_url == OPENAI_URL else "openai-compatible"
        )
        self.name = f"openai:{self.model}@{public_url(self.base_url)}"
        if self.base_url == OPENAI_URL and not os.environ.get(api_key_env):
            raise LLMNotConfigured(
                f"the openai summarizer reads its API key from ${api_key_env}, which is not "
                f"set; set it, or point llm_base_url at a local server"
            )
        #: One client per kind, with a fingerprint of the key it was made with.
        self._clients: dict[bool, tuple[bytes, Any]] = {}

    def __repr__(self) -> str:
        return (
            f"OpenAISummarizer(model={self.model!r}, base_url={public_url(self.base_url)!r}, "
            f"api_key_env={self.api_key_env!r}, timeout={self.timeout}, retries={self.retries})"
        )

    def _client(self, asynchronous: bool) -> Any:
        key = os.environ.get(self.api_key_env) or "not-needed-by-local-servers"
        fingerprint = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        held = self._clients.get(asynchronous)
        if held is not None and held[0] == fingerprint:
            return held[1]
        try:
            import openai
        except ImportError:
            raise LLMNotConfigured(
                "the openai summarizer needs the openai SDK: "
                "pip install 'ctxwindow-summarize[openai]'"
            ) from None
        kind = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        client = kind(
            api_key=key,
            base_url=self.base_url,
            timeout=self.timeout,  # per request: connect, read and write each
            max_retries=self.retries,
        )
        self._clients[asynchronous] = (fingerprint, client)
        return client

    def _messages(self, request: SummaryRequest) -> list[dict[str, str]]:
        words = max(20, int(request.target_tokens * 0.7))
        new = "\n".join(request.texts)
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(words=words)},
            {
                "role": "user",
                "content": f"Previous summary:\n{request.previous or '(none yet)'}\n\n"
                f"New messages ({len(request.texts)} turns, oldest first; 'user:' lines "
                "are the user's words, 'X called f(...)' lines tool calls, 'f result:' "
                f"lines tool results):\n{new}\n\nUpdated summary:",
            },
        ]

    def _result(self, response: Any) -> SummaryResult:
        choices = getattr(response, "choices", None) or []
        text = (choices[0].message.content or "").strip() if choices else ""
        usage = getattr(response, "usage", None)
        spent = LLMUsage(
            provider=self.provider,
            model=self.model,
            calls=1,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )
        if looks_like_error(text):
            shown = self._redacted(text)[:80]
            raise SummarizerFailed(self.name, f"returned no summary: {shown!r}", spent)
        return SummaryResult(text, spent)

    def _redacted(self, text: str) -> str:
        """``text`` with the API key blanked out: an error reply may echo it."""
        key = os.environ.get(self.api_key_env)
        return text.replace(key, "[redacted]") if key and len(key) >= 8 else text

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        problem = None
        try:
            response = self._client(False).chat.completions.create(
                model=self.model,
                messages=self._messages(request),
                max_tokens=request.target_tokens,
                temperature=0.2,
            )
        except Exception as error:  # the SDK's APIError, APITimeoutError, connection errors
            problem = _describe(error)
        if problem is not None:  # raised here, so that the SDK's error is not its context
            raise SummarizerFailed(self.name, problem)
        return self._result(response)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        problem = None
        try:
            response = await self._client(True).chat.completions.create(
                model=self.model,
                messages=self._messages(request),
                max_tokens=request.target_tokens,
                temperature=0.2,
            )
        except Exception as error:
            problem = _describe(error)
        if problem is not None:
            raise SummarizerFailed(self.name, problem)
        return self._result(response)


def _describe(error: Exception) -> str:
    """The error's kind and status, never its request (which may echo headers); our own
    errors (the SDK not installed) in full."""
    if isinstance(error, CtxWindowError):
        return f"{type(error).__name__}: {error}"
    status = getattr(error, "status_code", None)
    return f"{type(error).__name__}" + (f" (HTTP {status})" if status else "")


def public_url(url: str) -> str:
    """``url`` without a user, password, query or fragment: what may be shown."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))
