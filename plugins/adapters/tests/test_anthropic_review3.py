"""Anthropic adapter, third review: what a cut leaves of documents, search results and
tool results with images, how text-holding blocks and redacted thinking count, and what
BudgetTooSmall names when the ``system`` parameter is what does not fit."""

from __future__ import annotations

import copy
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic_api import check_messages  # noqa: E402

from ctxwindow import BudgetTooSmall, get_counter  # noqa: E402
from ctxwindow_adapters import anthropic as adapter  # noqa: E402

MARKER = "characters cut by ctxwindow to fit the token budget]"
TOOL_MARKER = "characters cut by ctxwindow from this tool result"
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
WORDS = "the quarterly revenue figure rose again this year " * 500


def sent_tokens(window: adapter.AnthropicWindow) -> int:
    """What the window as sent counts, read afresh (the approx counter, the default)."""
    counter = get_counter("approx")
    read = adapter.read_messages(window.messages, window.system)
    return sum(counter.count_message(message) for message in read.messages)


def test_truncating_cuts_a_plain_text_document_and_keeps_the_question() -> None:
    """A long plain-text document before the question in the newest user message: cut
    to fit, the document is what is cut (the marker at its end), the question stays
    whole, and the record's count is what the request counts."""
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "clause " * 5000},
        "title": "Contract",
    }
    question = {"type": "text", "text": "Summarise the contract."}
    messages = [{"role": "user", "content": [document, question]}]
    before = copy.deepcopy(messages)
    window = adapter.select(messages, budget=500, oversize="truncate")
    assert messages == before
    check_messages(window.messages)
    cut, kept = window.messages[0]["content"]
    assert kept is question
    assert cut["type"] == "document" and cut["title"] == "Contract"
    assert cut["source"]["data"].startswith("clause clause")
    assert cut["source"]["data"].endswith(MARKER)
    assert window.record.tokens_after <= 500
    assert sent_tokens(window) <= window.record.tokens_after


def test_truncating_a_document_after_long_text_drops_it_and_says_so() -> None:
    """The newest user message's text alone is over budget: the text is cut, and the
    document after it, whose words the cut took too, is not sent whole."""
    source = {"type": "text", "media_type": "text/plain", "data": "clause " * 2000}
    document = {"type": "document", "source": source}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "word " * 3000}, IMAGE, document]}
    ]
    window = adapter.select(messages, budget=300, oversize="truncate")
    check_messages(window.messages)
    blocks = window.messages[0]["content"]
    assert [block["type"] for block in blocks] == ["text", "image"]
    assert blocks[0]["text"].endswith(MARKER) and blocks[1] is IMAGE
    assert sent_tokens(window) <= window.record.tokens_after <= 300


def test_a_truncated_text_block_keeps_its_cache_control() -> None:
    cached = {"type": "text", "text": "word " * 3000, "cache_control": {"type": "ephemeral"}}
    second = {"type": "text", "text": "second block"}
    messages = [{"role": "user", "content": [IMAGE, cached, second]}]
    window = adapter.select(messages, budget=300, oversize="truncate")
    check_messages(window.messages)
    image, text = window.messages[0]["content"]
    assert image is IMAGE
    assert text["cache_control"] == {"type": "ephemeral"} and text["text"].endswith(MARKER)
    assert sent_tokens(window) <= window.record.tokens_after <= 300


def shot_history(result: list[Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "take a screenshot and read the log"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": result}],
        },
    ]


def test_a_cut_tool_result_keeps_its_image_beside_the_cut_text() -> None:
    """oversize='cut' (the default) cuts a current-turn result holding a screenshot and
    a long log: the image stays, in its place, and the record counts what is sent."""
    log = {"type": "text", "text": "log line " * 2000, "cache_control": {"type": "ephemeral"}}
    messages = shot_history([IMAGE, log])
    window = adapter.select(messages, budget=600)
    check_messages(window.messages)
    content = window.messages[-1]["content"][0]["content"]
    assert isinstance(content, list) and content[0] is IMAGE
    (text,) = content[1:]
    assert text["type"] == "text" and TOOL_MARKER in text["text"]
    assert text["cache_control"] == {"type": "ephemeral"}
    assert window.record.decisions[-1].action == "truncated"
    assert sent_tokens(window) <= window.record.tokens_after <= 600


def test_a_cleared_tool_result_is_its_stub_alone() -> None:
    """A strategy's stand-in (a cleared output) replaces the whole result, images too:
    only the host's cut keeps them."""
    messages = [
        *shot_history([IMAGE, {"type": "text", "text": "log line " * 300}]),
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
    ]
    window = adapter.select(
        messages, 100_000, "clear_tool_outputs", keep_recent=0, min_tokens=10, when="always"
    )
    content = window.messages[2]["content"][0]["content"]
    assert isinstance(content, str) and "cleared by ctxwindow" in content


SEARCH_RESULT = {
    "type": "search_result",
    "source": "https://kb.example.com/1",
    "title": "Q3",
    "content": [{"type": "text", "text": WORDS}, {"type": "text", "text": "Second chunk."}],
}
CONTENT_DOCUMENT = {
    "type": "document",
    "source": {"type": "content", "content": [{"type": "text", "text": WORDS}, IMAGE]},
    "title": "Report",
}


@pytest.mark.parametrize("block", [SEARCH_RESULT, CONTENT_DOCUMENT], ids=["search", "document"])
def test_search_results_and_content_documents_count_their_words(block: dict[str, Any]) -> None:
    counter = get_counter("approx")
    user = {"role": "user", "content": [block, {"type": "text", "text": "Summarise."}]}
    (message,) = adapter.read_messages([user]).messages
    assert counter.count_message(message) > len(WORDS) // 4
    with pytest.raises(BudgetTooSmall):
        adapter.select([user], budget=1000)
    answer = shot_history([block])
    result = next(m for m in adapter.read_messages(answer).messages if m.role == "tool")
    assert counter.count_message(result) > len(WORDS) // 4


@pytest.mark.parametrize("block", [SEARCH_RESULT, CONTENT_DOCUMENT], ids=["search", "document"])
def test_a_search_result_or_content_document_is_cut_in_its_own_shape(block: dict[str, Any]) -> None:
    question = {"type": "text", "text": "Summarise."}
    messages = [{"role": "user", "content": [block, question]}]
    window = adapter.select(messages, budget=500, oversize="truncate")
    check_messages(window.messages)
    cut, kept = window.messages[0]["content"]
    assert kept is question
    assert cut["type"] == block["type"] and cut["title"] == block["title"]
    inner = cut["content"] if cut["type"] == "search_result" else cut["source"]["content"]
    assert inner[0]["text"].startswith(WORDS[:40]) and inner[0]["text"].endswith(MARKER)
    assert [b["type"] for b in inner] == (["text"] if block is SEARCH_RESULT else ["text", "image"])
    assert sent_tokens(window) <= window.record.tokens_after <= 500


def test_redacted_thinking_counts_a_bounded_amount_not_its_data() -> None:
    blob = "EmwKAhgBEgy" + "A" * 300_000
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [{"type": "redacted_thinking", "data": blob}, {"type": "text", "text": "a"}],
        },
        {"role": "user", "content": "q2"},
    ]
    window = adapter.select(messages, budget=10_000)
    assert window.messages == messages
    assert window.record.tokens_after < 200


def test_budget_too_small_for_the_system_parameter_names_it() -> None:
    with pytest.raises(BudgetTooSmall) as caught:
        adapter.select([{"role": "user", "content": "hi"}], budget=50, system="rule " * 200)
    text = str(caught.value)
    assert caught.value.position is None
    assert "the biggest is the system parameter, " in text and "message 0" not in text
    assert caught.value.biggest is not None and caught.value.biggest.startswith("the system")


def test_documents_after_the_one_cut_go_and_their_images_stay() -> None:
    """Three documents before the question: the first kept whole, the second cut, the
    third (a custom-content one holding an image) gone, its image sent in its place."""
    first = {"type": "document", "source": {"type": "text", "media_type": "text/plain",
             "data": "short note"}}  # fmt: skip
    second = {"type": "document", "source": {"type": "text", "media_type": "text/plain",
              "data": "clause " * 3000}}  # fmt: skip
    third = {"type": "document", "source": {"type": "content", "content": [
        {"type": "text", "text": "annex " * 3000}, IMAGE]}}  # fmt: skip
    question = {"type": "text", "text": "Compare them."}
    messages = [{"role": "user", "content": [first, second, third, question]}]
    window = adapter.select(messages, budget=800, oversize="truncate")
    check_messages(window.messages)
    blocks = window.messages[0]["content"]
    assert blocks[0] is first and blocks[2] is IMAGE and blocks[3] is question
    assert blocks[1]["source"]["data"].startswith("clause ")
    assert blocks[1]["source"]["data"].endswith(MARKER)
    assert sent_tokens(window) <= window.record.tokens_after <= 800


def test_a_cut_tool_result_of_search_results_keeps_its_images() -> None:
    """A result holding a search result (words), an image and a PDF: the words cut into
    one text block where they began, the image and the PDF kept in their order."""
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
           "data": "JVBERi0="}}  # fmt: skip
    messages = shot_history([SEARCH_RESULT, IMAGE, pdf])
    window = adapter.select(messages, budget=600)
    check_messages(window.messages)
    text, image, kept_pdf = window.messages[-1]["content"][0]["content"]
    assert image is IMAGE and kept_pdf is pdf
    assert text["type"] == "text" and text["text"].startswith("Q3\nhttps://kb.example.com/1\n")
    assert TOOL_MARKER in text["text"]
    assert sent_tokens(window) <= window.record.tokens_after <= 600
