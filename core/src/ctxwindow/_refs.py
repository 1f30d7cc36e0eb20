"""How a summary's ``metadata.covers`` names the messages it stands for by position."""

from __future__ import annotations


def covers_position(ref: object) -> int | None:
    """The position a ``metadata.covers`` reference names by position (``#3``, as
    ``History.covers_ref`` writes it), whether or not a history holds it; None for any
    other reference (a message id). The one reading of that form, for the runner's
    check and for whoever maps a summary's covers."""
    if isinstance(ref, str) and ref.startswith("#") and ref[1:].isdigit():
        return int(ref[1:])
    return None
