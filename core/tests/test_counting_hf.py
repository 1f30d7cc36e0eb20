"""The hf counter on what a history may hold and where it is run: a lone surrogate (an
emoji cut in half) is counted as tiktoken counts it, and a relative tokenizer path is
the file it leads to from the current folder, not the first one it was read from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Message

SENTENCES = ["the cat sat on the mat", "a dog and a cat", "cut emoji here"]


def _words(folder: Path) -> Path:
    """A word-level tokenizer.json in ``folder``: one token a word."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def _bytes(folder: Path) -> Path:
    """A byte-level BPE tokenizer.json in ``folder`` (GPT-2's kind): any text has tokens,
    U+FFFD its three bytes' worth."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(SENTENCES, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


# -- lone surrogates -----------------------------------------------------------------------
@pytest.mark.parametrize("make", [_words, _bytes])
def test_hf_counts_a_lone_surrogate_as_the_replacement_character(tmp_path: Path, make: Any) -> None:
    """tokenizers refuses a str with a lone surrogate; tiktoken counts it as U+FFFD."""
    counter = ctxwindow.get_counter(f"hf:{make(tmp_path)}")
    assert counter.count_text("cut \ud83d here") == counter.count_text("cut \ufffd here")
    # a pair, as JSON's escapes read, is the character it spells
    assert counter.count_text("cut \ud83d\ude80 here") == counter.count_text("cut 🚀 here")
    cut = Message.from_dict({"role": "user", "content": "cut emoji \ud83d here"})
    whole = Message.from_dict({"role": "user", "content": "cut emoji \ufffd here"})
    assert counter.count_message(cut) == counter.count_message(whole)


def test_hf_counts_a_lone_surrogate_as_tiktoken_does(tmp_path: Path) -> None:
    pytest.importorskip("tiktoken")
    tiktoken = ctxwindow.get_counter("tiktoken:cl100k_base")
    assert tiktoken.count_text("a \udc00 b") == tiktoken.count_text("a \ufffd b")
    hf = ctxwindow.get_counter(f"hf:{_bytes(tmp_path)}")
    assert hf.count_text("a \udc00 b") == hf.count_text("a \ufffd b")


def test_select_and_the_cli_window_a_history_with_a_lone_surrogate(tmp_path: Path) -> None:
    from ctxwindow._cli import main

    path = _words(tmp_path / "tok")
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "cut emoji \ud83d here"},
    ]
    window = ctxwindow.select(history, 1000, "newest", counter=f"hf:{path}")
    assert window.messages == history
    chat = tmp_path / "surrogate.json"
    chat.write_text(json.dumps(history), encoding="utf-8")  # as "\ud83d", ASCII escapes
    record = tmp_path / "record.json"
    code = main(
        [
            "select",
            str(chat),
            "-s",
            "newest",
            "-b",
            "1000",
            "-c",
            f"hf:{path}",
            "--record",
            str(record),
        ]
    )
    assert code == 0
    assert json.loads(record.read_text())["tokens_before"] == window.record.tokens_before


def test_text_with_no_surrogate_is_not_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common text is encoded as it is: no copy, no scan for surrogates."""
    from ctxwindow import _tokens

    looked: list[str] = []
    real = _tokens.without_lone_surrogates

    def spy(text: str) -> str:
        looked.append(text)
        return real(text)

    monkeypatch.setattr(_tokens, "without_lone_surrogates", spy)
    counter = _tokens.hf_counter(str(_bytes(tmp_path)))
    counter.count_text("the cat sat on the mat, naïve café 🚀")
    assert looked == []
    counter.count_text("half \ud83d")
    assert looked == ["half \ud83d"]


@pytest.mark.parametrize("make", [_words, _bytes])
def test_a_long_text_counts_the_tokens_a_short_ones_encoding_gives(
    tmp_path: Path, make: Any
) -> None:
    """From HF_LONG_TEXT characters on a text is encoded as a batch of one (which lets
    go of Python's lock): the same tokens, lone surrogates included."""
    from tokenizers import Tokenizer

    from ctxwindow import _tokens

    file = make(tmp_path)
    tokenizer = Tokenizer.from_file(str(file))
    counter = _tokens.hf_counter(str(file))
    text = " ".join(SENTENCES) * (_tokens.HF_LONG_TEXT // 20)
    assert len(text) >= _tokens.HF_LONG_TEXT
    assert counter.count_text(text) == len(tokenizer.encode(text, add_special_tokens=False).ids)
    cut = text + " half \ud83d"
    fixed = _tokens.without_lone_surrogates(cut)
    assert counter.count_text(cut) == len(tokenizer.encode(fixed, add_special_tokens=False).ids)


@pytest.mark.slow
def test_other_threads_run_while_a_long_text_is_counted(tmp_path: Path) -> None:
    """A server's event loop keeps turning while its worker counts a big tool result:
    the tokenizer's plain encode held Python's lock for the whole text."""
    import threading
    import time

    counter = ctxwindow.get_counter(f"hf:{_bytes(tmp_path)}")
    text = "the cat sat on the mat, a dog and a cat " * 100_000  # 4 MB: seconds to encode
    done = threading.Event()
    beats = 0

    def beat() -> None:
        nonlocal beats
        while not done.is_set():
            beats += 1
            time.sleep(0.001)

    beating = threading.Thread(target=beat)
    beating.start()
    time.sleep(0.01)
    before = beats
    counter.count_text(text)
    during = beats - before
    done.set()
    beating.join(10)
    assert during > 20, f"the other thread ran {during} times while the text was counted"


# -- relative paths ------------------------------------------------------------------------
def test_a_relative_hf_path_is_the_file_it_leads_to_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """select() shares a counter by its spec: after os.chdir, 'hf:tokenizer.json' is
    another file, and the record names the one it counted with."""
    words = _words(tmp_path / "a")
    pieces = _bytes(tmp_path / "b")
    history = [{"role": "system", "content": "the zebra quickly sat"}]  # words: 4 tokens
    truth = {
        path: ctxwindow.get_counter(f"hf:{path}").count_message(Message.from_dict(history[0]))
        for path in (words, pieces)
    }
    assert truth[words] != truth[pieces]
    seen, expected = [], []
    for folder, path in (("a", words), ("b", pieces), ("a", words)):
        monkeypatch.chdir(tmp_path / folder)
        window = ctxwindow.select(history, 1000, "newest", counter="hf:tokenizer.json")
        fresh = ctxwindow.from_config(
            {"strategy": "newest", "budget": 1000, "counter": "hf:tokenizer.json"}
        ).select(history)
        for record in (window.record, fresh.record):
            seen.append((folder, record.tokens_before, record.counter))
            expected.append((folder, truth[path], f"hf:{path}"))
    assert seen == expected


def test_one_file_by_any_path_is_one_shared_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _words(tmp_path / "tok")
    monkeypatch.chdir(tmp_path)
    counter = ctxwindow.get_counter(f"hf:{path}")
    assert ctxwindow.get_counter("hf:tok/tokenizer.json") is counter
    assert ctxwindow.get_counter("hf:./tok/../tok/tokenizer.json") is counter
    assert counter.name == f"hf:{path}"
    # the folder names the same file, though as another spec it is another counter
    assert ctxwindow.get_counter("hf:tok").name == f"hf:{path}"


def test_a_home_relative_hf_path_is_from_home_not_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _words(tmp_path / "home" / "tok")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("USERPROFILE", str(tmp_path / "home"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert ctxwindow.get_counter("hf:~/tok/tokenizer.json").name == f"hf:{path}"
