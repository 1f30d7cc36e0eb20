"""The ``openai`` summarizer: any OpenAI-compatible chat-completions endpoint (OpenAI,
Azure OpenAI, Ollama, vLLM, a llama.cpp server) through the official ``openai`` SDK.

The API key is read from the environment variable the config names, at call time (a
rotated key is used from the next call on), and never put in a record, a log line, a
repr or an error message: an SDK error is reported by its type and HTTP status alone,
and raised without the SDK's exception attached (its request carries the key and its
body may echo it). The endpoint is named without any user, password or query string,
and with the key, or any path segment that looks like a credential, masked in its path
(some gateways take the key there).

The SDK is imported, and the client built, when the summarizer is made (the strategy's
configuration), not at its first call: ``import openai`` takes seconds, which a first
call under a short ``time_limit`` cannot spare. This module does not import it, so
``import ctxwindow`` and strategies that use no ``openai`` summarizer never do.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ctxwindow import (
    ApproxCounter,
    LLMUsage,
    Message,
    SummaryRequest,
    SummaryResult,
    TokenCounter,
)
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
#: The instructions in short, for an input limit that the full ones would take more
#: than a quarter of (``llm_max_input`` may be as low as 200 tokens).
SHORT_PROMPT = (
    "Update the running summary of a conversation with the new messages. Keep the "
    "user's task, the decisions, the open items and every id, name, date and number "
    "exactly. Plain sentences, no preamble, at most {words} words."
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


#: What stands in a public URL for the API key found in it.
REDACTED = "[redacted]"
#: A path segment that begins the way providers' keys do (``sk-...``, ``gsk_...``).
_KEY_PREFIX = re.compile(r"^(sk|pk|rk|gsk|xai|hf|api[-_]?key)[-_]", re.IGNORECASE)
#: A UUID (an account's id or a key): 8-4-4-4-12 hex digits.
_UUID = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
#: Keys shorter than this are not searched for in URLs or replies: too likely to match
#: an ordinary word or path segment by chance.
MIN_KEY_CHARS = 8
#: Tokens added to the counted prompt for what varies with the request (the digits of
#: the word limit and of the number of messages), so the overhead is an upper bound.
_VARYING_DIGITS = 4


def looks_like_error(text: str) -> bool:
    """Whether a summarizer's reply is empty or plainly error text, not a summary."""
    return not text.strip() or bool(_ERROR_TEXT.match(text))


class OpenAISummarizer:
    """Summarizes with a chat model; timeouts and retries are the SDK's own.

    ``prompt_overhead`` is what its instructions and the framing of the previous summary
    and of the new messages add to a request's texts, in tokens of the ``approx`` counter
    (4 characters a token, 3 a message, as the strategy counts texts): a strategy keeps
    that much free under ``max_input_tokens`` so that the whole request fits it. The
    texts' own line breaks (one a text) are not in it. Under a limit the full
    instructions would take more than a quarter of, the short ones are sent instead.
    """

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
        #: The endpoint as shown: fixed here, as the name is part of every cache key.
        self._public_url = public_url(self.base_url, os.environ.get(api_key_env))
        self.name = f"openai:{self.model}@{self._public_url}"
        if self.base_url == OPENAI_URL and not os.environ.get(api_key_env):
            raise LLMNotConfigured(
                f"the openai summarizer reads its API key from ${api_key_env}, which is not "
                f"set; set it, or point llm_base_url at a local server"
            )
        #: Whether the short instructions are sent (see the class).
        self._short = False
        full = self.count_overhead(ApproxCounter())
        self._short = full > max_input_tokens // 4
        self.prompt_overhead: int = self.count_overhead(ApproxCounter()) if self._short else full
        try:
            import openai
        except ImportError:
            raise LLMNotConfigured(
                "the openai summarizer needs the openai SDK: "
                "pip install 'ctxwindow-summarize[openai]'"
            ) from None
        self._openai: Any = openai
        #: One client per kind, with a fingerprint of the key it was made with. The sync
        #: one (which the strategy calls) is made now, its first call's lazy imports
        #: included; the async one at its first use.
        self._clients: dict[bool, tuple[bytes, Any]] = {}
        self._client(False).chat.completions  # noqa: B018  (imports the SDK's resources)

    def __repr__(self) -> str:
        return (
            f"OpenAISummarizer(model={self.model!r}, base_url={self._public_url!r}, "
            f"api_key_env={self.api_key_env!r}, timeout={self.timeout}, retries={self.retries})"
        )

    def count_overhead(self, counter: TokenCounter) -> int:
        """The tokens a request adds to its texts as ``counter`` counts them: its
        messages with no text in them, the varying digits at their most. The strategy
        asks with its visit's counter; ``prompt_overhead`` is this under ``approx``."""
        frame = self._messages(SummaryRequest(None, [], self.max_input_tokens, counter))
        counted = sum(counter.count_message(Message("user", m["content"])) for m in frame)
        return counted + _VARYING_DIGITS

    def _client(self, asynchronous: bool) -> Any:
        key = os.environ.get(self.api_key_env) or "not-needed-by-local-servers"
        fingerprint = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        held = self._clients.get(asynchronous)
        if held is not None and held[0] == fingerprint:
            return held[1]
        kind = self._openai.AsyncOpenAI if asynchronous else self._openai.OpenAI
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
        if self._short:
            return [
                {"role": "system", "content": SHORT_PROMPT.format(words=words)},
                {
                    "role": "user",
                    "content": f"Previous summary:\n{request.previous or '(none yet)'}\n\n"
                    f"New messages, oldest first:\n{new}\n\nUpdated summary:",
                },
            ]
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
        """The reply's summary and what it cost. The usage the endpoint reports is read
        defensively: a count that is not a non-negative integer (a gateway's ``"lots"``,
        a negative number, null) counts as unknown, 0, and the summary is kept: a bad
        count must neither discard a paid-for summary nor hide the call (``calls`` is 1
        whatever the counts say). A SummaryResult carries no notes, so the record does
        not say which counts were unknown."""
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        content = getattr(message, "content", None)
        text = content.strip() if isinstance(content, str) else ""
        usage = getattr(response, "usage", None)
        spent = LLMUsage(
            provider=self.provider,
            model=self.model,
            calls=1,
            prompt_tokens=_count(getattr(usage, "prompt_tokens", None)),
            completion_tokens=_count(getattr(usage, "completion_tokens", None)),
        )
        if looks_like_error(text):
            shown = self._redacted(text)[:80]
            raise SummarizerFailed(self.name, f"returned no summary: {shown!r}", spent)
        return SummaryResult(text, spent)

    def _redacted(self, text: str) -> str:
        """``text`` with the API key blanked out: an error reply may echo it."""
        key = os.environ.get(self.api_key_env)
        return text.replace(key, REDACTED) if key and len(key) >= MIN_KEY_CHARS else text

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


def _count(value: object) -> int:
    """``value`` as a token count from an endpoint's usage, 0 (unknown) when it is not a
    non-negative integer: an endpoint's odd usage field must not fail a good summary."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return max(int(value), 0)
    return 0


def public_url(url: str, key: str | None = None) -> str:
    """``url`` without a user, password, query or fragment, and with ``key`` (the API
    key, when known) and any path segment that looks like a credential masked: what
    may be shown. Some gateways take the key in the path (``.../v1/<key>``). The key
    itself becomes ``[redacted]`` (the same endpoint with a rotated key keeps its name,
    and so its cached summaries); a segment that only looks like a secret becomes
    ``[redacted:<digest>]``, a short hash, as it may be what tells two endpoints apart
    (an account's id). Deterministic, so the name it is part of stays the same."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    known = key if key and len(key) >= MIN_KEY_CHARS else None
    path = "/".join(_masked(segment, known) for segment in parts.path.split("/"))
    if known is not None:
        host = host.replace(known, REDACTED)
    return urlunsplit((parts.scheme, host + port, path, "", ""))


def _masked(segment: str, key: str | None) -> str:
    """A path segment as shown: the key in it redacted, a credential-like one masked."""
    if key is not None and (key in unquote(segment) or quote(key, safe="") in segment):
        return REDACTED
    if _looks_secret(unquote(segment)):
        digest = hashlib.sha256(segment.encode("utf-8", "surrogatepass")).hexdigest()
        return f"[redacted:{digest[:8]}]"
    return segment


def _looks_secret(segment: str) -> bool:
    """Whether a path segment looks like a credential: a provider's key prefix on a long
    enough token, a UUID, or a long run mixing letters and digits (a random token, a hex
    or base64 id), as model and route names (``gpt-4o-mini-2024-07-18``) do not."""
    if _KEY_PREFIX.match(segment) and len(segment) >= 12:
        return True
    if _UUID.match(segment):
        return True
    for piece in re.split(r"[-_.~]", segment):
        letters = sum(c.isalpha() for c in piece)
        digits = sum(c.isdigit() for c in piece)
        if len(piece) >= 16 and letters and digits:
            return True
    return bool(re.fullmatch(r"[A-Za-z0-9+/=]{40,}", segment))
