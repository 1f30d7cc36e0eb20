"""Benchmark conversations: LoCoMo's JSON, or the user's own JSONL, as messages + questions.

A conversation becomes OpenAI-format dicts with an ``id`` per message, so a window's
messages can be matched back to a question's evidence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwindow import read_messages_file
from ctxwindow.errors import ConfigError, InvalidMessage

#: How a LoCoMo conversation is written out as messages (:func:`load_locomo`).
RENDERINGS = ("headers", "timestamps", "inline")
_EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    evidence: tuple[str, ...]
    category: int | None = None
    answer: str | None = None


@dataclass
class EvalConversation:
    """One conversation: its messages (dicts with ``id``) and the questions asked at its end."""

    id: str
    messages: list[dict[str, Any]]
    questions: list[Question]

    def texts(self) -> dict[str, str]:
        """Message id to text, for scoring summaries."""
        ids = ((message_id(m), m) for m in self.messages)
        return {str(i): str(m.get("content") or "") for i, m in ids if i is not None}


def message_id(message: Any) -> Any:
    """A message's id, from ``id`` or ``metadata.id`` (as ctxwindow reads it); None
    without one."""
    if not isinstance(message, dict):
        return None
    if message.get("id") is not None:
        return message["id"]
    metadata = message.get("metadata")
    return metadata.get("id") if isinstance(metadata, dict) else None


class _SampleFault(ValueError):
    """What is wrong in a sample, said in words (the loader adds the file and sample)."""


class BadSample(ConfigError):
    """A LoCoMo sample at fault, named with its file: the file is LoCoMo's JSON."""


def category_of(value: Any, where: str) -> int | None:
    """A question's category as a whole number (``4`` or ``"4"``); None without one.
    Anything else is a ConfigError naming ``where``."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(
        f"{where}: category must be a whole number (LoCoMo's 1 to 5), got {value!r}; "
        "give one, or leave it out"
    )


@dataclass
class LoadReport:
    """What the loader repaired, dropped and skipped, so nothing is lost silently."""

    repaired: list[str] = field(default_factory=list)
    dropped_evidence: list[str] = field(default_factory=list)
    skipped_questions: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.repaired)} evidence ids repaired, {len(self.dropped_evidence)} dropped "
            f"(naming no turn), {len(self.skipped_questions)} questions skipped (no evidence)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "repaired": self.repaired,
            "dropped_evidence": self.dropped_evidence,
            "skipped_questions": self.skipped_questions,
        }


def load_locomo(
    path: str | Path, render: str = "headers"
) -> tuple[list[EvalConversation], LoadReport]:
    """Read LoCoMo's JSON (a list of samples) as documented in its README.

    One message per turn (speaker_a as "user", speaker_b as "assistant", the speaker in
    ``name``, the dia_id as ``id``), image turns with their caption. ``render`` says how
    the rest is written, so a scorer's lean on surface cues shows: ``headers`` (one short
    user message per session giving its date, before the session's first turn),
    ``timestamps`` (no such message: the session's date is each turn's
    ``metadata.timestamp``, ISO 8601) or ``inline`` (headers, and the speaker in the
    text, "Caroline: ...", with no ``name``).
    """
    if render not in RENDERINGS:
        raise ConfigError(f"render must be one of {', '.join(RENDERINGS)}, got {render!r}")
    samples = _read_json(Path(path))
    if not isinstance(samples, list):
        raise ConfigError(
            f"benchmark file {str(path)!r} must hold LoCoMo's JSON: a list of samples"
        )
    report = LoadReport()
    conversations = []
    for index, sample in enumerate(samples):
        where = f"benchmark file {str(path)!r}: sample {index}"
        try:
            conversations.append(_locomo_conversation(sample, report, render, where))
        except _SampleFault as error:
            raise BadSample(f"{where}: {error}; fix it, or leave the sample out") from None
        except ConfigError as error:
            raise BadSample(str(error)) from None
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ConfigError(
                f"{where} is not a LoCoMo sample ({type(error).__name__}: {error})"
            ) from None
    return conversations, report


def _locomo_conversation(
    sample: dict[str, Any], report: LoadReport, render: str = "headers", where: str = "sample"
) -> EvalConversation:
    """One sample as a conversation with its questions; evidence repaired as in ``report``."""
    messages = _locomo_messages(sample, render)
    known = {m["id"] for m in messages}
    questions = []
    for number, qa in enumerate(sample.get("qa", [])):
        question_id = f"{sample['sample_id']}#q{number}"
        raw = qa.get("evidence") or []
        if isinstance(raw, str):  # one id (or ids joined in one string), not its letters
            raw = [raw]
        evidence = _repair_evidence(raw, known, question_id, report)
        if not evidence:
            report.skipped_questions.append(question_id)
            continue
        answer = qa.get("answer", qa.get("adversarial_answer"))
        questions.append(
            Question(
                id=question_id,
                text=str(qa["question"]),
                evidence=evidence,
                category=category_of(qa.get("category"), f"{where}, question {number}"),
                answer=None if answer is None else str(answer),
            )
        )
    return EvalConversation(str(sample["sample_id"]), messages, questions)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"benchmark file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(
            f"benchmark file {str(path)!r} is a directory; give LoCoMo's JSON file"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ConfigError(f"benchmark file {str(path)!r} is not JSON: {error}") from None


def _locomo_messages(sample: dict[str, Any], render: str = "headers") -> list[dict[str, Any]]:
    conversation = sample["conversation"]
    speaker_a = conversation["speaker_a"]
    sessions = sorted(
        (int(match.group(1)), key)
        for key in conversation
        if (match := _SESSION_KEY.fullmatch(key)) and isinstance(conversation[key], list)
    )
    messages: list[dict[str, Any]] = []
    for number, key in sessions:
        date = conversation.get(f"{key}_date_time")
        stamp = _session_timestamp(str(date)) if date and render == "timestamps" else None
        if date and render != "timestamps":
            messages.append(
                {"role": "user", "content": f"[Session {number}: {date}]", "id": f"S{number}"}
            )
        for turn in conversation[key]:
            text = turn.get("text") or ""
            if not isinstance(text, str):
                raise _SampleFault(
                    f"turn {turn.get('dia_id')!r} of {key} has a 'text' that is not a "
                    f"string ({type(text).__name__})"
                )
            if turn.get("blip_caption"):
                text = f"{text} [shares an image: {turn['blip_caption']}]"
            message = {
                "role": "user" if turn["speaker"] == speaker_a else "assistant",
                "name": turn["speaker"],
                "content": text,
                "id": turn["dia_id"],
            }
            if render == "inline":
                message["content"] = f"{message.pop('name')}: {text}"
            if stamp:
                message["metadata"] = {"timestamp": stamp}
            messages.append(message)
    return messages


def _session_timestamp(text: str) -> str | None:
    """A LoCoMo session date ("1:56 pm on 8 May, 2023") as ISO 8601, to the minute."""
    match = _SESSION_DATE.fullmatch(text.strip())
    if not match:
        return None
    hour, minute = int(match["hour"]) % 12, int(match["minute"] or 0)
    hour += 12 if match["half"].lower() == "pm" else 0
    month = _MONTH_NUMBERS.get(match["month"].lower()[:3])
    if month is None:
        return None
    day, year = int(match["day"]), int(match["year"])
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:00"


_SESSION_DATE = re.compile(
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d\d))?\s*(?P<half>[ap]m)\s+on\s+(?P<day>\d{1,2})\s+"
    r"(?P<month>[A-Za-z]+),?\s+(?P<year>\d{4})",
    re.IGNORECASE,
)
_MONTH_NUMBERS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}


def _repair_evidence(
    raw: Iterable[str], known: set[str], question_id: str, report: LoadReport
) -> tuple[str, ...]:
    """Split joined ids, fix "D:11:26" and zero padding, drop ids naming no turn."""
    kept: list[str] = []
    for entry in raw:
        pieces = [piece for piece in re.split(r"[;,\s]+", str(entry)) if piece]
        for piece in pieces:
            match = _EVIDENCE_ID.fullmatch(piece)
            fixed = f"D{int(match.group(1))}:{int(match.group(2))}" if match else piece
            if fixed != entry:
                report.repaired.append(f"{question_id}: {entry!r} -> {fixed!r}")
            if fixed not in known:
                report.dropped_evidence.append(f"{question_id}: {piece!r}")
            elif fixed not in kept:
                kept.append(fixed)
    return tuple(kept)


def load_jsonl(
    messages_path: str | Path, questions_path: str | Path, name: str | None = None
) -> tuple[list[EvalConversation], LoadReport]:
    """Your own conversation: JSONL of OpenAI-format messages, each with an ``id`` (or a
    ``metadata.id``), and JSONL of questions ``{"question", "evidence": [message ids],
    "category"?, "answer"?}``.
    """
    messages = read_messages_file(str(messages_path))
    report = LoadReport()
    known = _message_ids(messages, str(messages_path))
    questions = []
    for number, row in enumerate(_read_questions(str(questions_path))):
        if not isinstance(row, dict) or "question" not in row:
            raise ConfigError(f"{questions_path}: entry {number} needs a 'question'")
        question_id = str(row.get("id", f"q{number}"))
        where = f"{questions_path}: entry {number}"
        evidence: list[str] = []
        for item in _evidence_ids(row.get("evidence"), where):
            if item not in known:
                report.dropped_evidence.append(f"{question_id}: {item!r}")
            elif item not in evidence:  # a turn named twice weighs once, as in LoCoMo's
                evidence.append(item)
        if not evidence:
            report.skipped_questions.append(question_id)
            continue
        answer = row.get("answer")
        questions.append(
            Question(
                question_id,
                str(row["question"]),
                tuple(evidence),
                category_of(row.get("category"), where),
                None if answer is None else str(answer),
            )
        )
    label = name or Path(messages_path).stem
    return [EvalConversation(label, messages, questions)], report


def _message_ids(messages: list[Any], source: str) -> set[str]:
    """Each message's id; a message without one, or an id two messages share (evidence
    names one message), is a ConfigError."""
    seen: dict[str, int] = {}
    for position, message in enumerate(messages):
        found = message_id(message)
        if found is None:
            raise ConfigError(
                f"{source}: message {position} has no 'id' (nor 'metadata.id'); evidence "
                "refers to message ids"
            )
        if str(found) in seen:
            raise ConfigError(
                f"{source}: messages {seen[str(found)]} and {position} share the id "
                f"{str(found)!r}; evidence names one message: give each its own id"
            )
        seen[str(found)] = position
    return set(seen)


#: What a questions file holds, for its errors.
QUESTIONS_FORMAT = (
    'JSONL with one {"question": ..., "evidence": [message ids]} a line (or a JSON array of them)'
)


def _read_questions(path: str) -> list[Any]:
    """The entries of the questions file; its errors name it as the questions file."""
    source = Path(path)
    if not source.exists():
        raise ConfigError(f"questions file {path!r} does not exist; give {QUESTIONS_FORMAT}")
    try:
        if source.is_file() and not source.read_bytes().strip():
            raise ConfigError(f"questions file {path!r} is empty; give {QUESTIONS_FORMAT}")
        return read_messages_file(path)
    except InvalidMessage as error:
        raise ConfigError(f"questions file {path!r}: {error.problem}") from None
    except OSError as error:
        raise ConfigError(f"questions file {path!r} cannot be read: {error}") from None


def _evidence_ids(raw: Any, where: str) -> list[str]:
    """A question's evidence as ids: a list of them, or one id alone (not its letters)."""
    if raw is None:
        return []
    if isinstance(raw, (str, int)) and not isinstance(raw, bool):
        return [str(raw)]
    if isinstance(raw, list) and all(
        isinstance(i, (str, int)) and not isinstance(i, bool) for i in raw
    ):
        return [str(i) for i in raw]
    raise ConfigError(
        f'{where}: evidence must be a list of message ids, got {raw!r}; give them as ["m1", "m2"]'
    )
