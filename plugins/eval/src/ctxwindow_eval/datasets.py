"""Public benchmarks by name: ``ctxwindow eval locomo`` fetches the file from where its
authors publish it, once, into the user's cache, and says where it came from and under
which licence (a user has no copy of the repository's benchmark folder).

Each file is pinned to a commit of its source repository and to its sha256 there: a
download (from the source or a mirror) that is not that file is refused and not saved,
and the cached copy is checked again on every use. A dataset without a pinned hash
would be checked against the hash recorded beside it when it was first fetched (trust on
first use, the hash printed so it can be compared with the source).
``CTXWINDOW_DATASET_MIRROR`` names a base URL to fetch ``<base>/<file name>`` from
instead (a mirror, or a local server in tests), checked the same way.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxwindow.errors import ConfigError

MIRROR_ENV = "CTXWINDOW_DATASET_MIRROR"
TIMEOUT_S = 60
CHUNK = 1 << 16


@dataclass(frozen=True)
class PublicDataset:
    """A benchmark file as its authors publish it."""

    name: str
    #: ``"locomo"`` (conversations with questions) or ``"agent"`` (trajectories).
    kind: str
    url: str
    #: The sha256 of the file at ``url``; None when this release has not pinned it.
    sha256: str | None
    what: str
    licence: str

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[1]


DATASETS = {
    "locomo": PublicDataset(
        name="locomo",
        kind="locomo",
        url="https://raw.githubusercontent.com/snap-research/locomo/"
        "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376/data/locomo10.json",
        # 2,805,274 bytes, as LoCoMo's users publish it (for instance the tests of
        # harnesses that pin this commit)
        sha256="79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
        what="LoCoMo, the 10 long conversations of data/locomo10.json (Maharana et al., "
        '"Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024)',
        licence="CC BY-NC 4.0: non-commercial use, credit the authors where results are shown",
    ),
    "tau-airline": PublicDataset(
        name="tau-airline",
        kind="agent",
        url="https://raw.githubusercontent.com/sierra-research/tau-bench/"
        "7362a1708d720a4d697d042f21fd8637ea144c3b/historical_trajectories/gpt-4o-airline.json",
        # 4,114,038 bytes (LF line ends, as GitHub serves it; a Windows clone's CRLF copy
        # hashes otherwise)
        sha256="e9e6c0297660c537f83d4fd9c476ce7a9a86ecd2784874b7bfc13be598e37bfa",
        what="tau-bench airline, gpt-4o agent trajectories "
        "(sierra-research/tau-bench, historical_trajectories/gpt-4o-airline.json)",
        licence="MIT",
    ),
}


def cache_folder() -> Path:
    """Where fetched benchmarks are kept: ``$XDG_CACHE_HOME/ctxwindow/datasets``
    (``~/.cache`` without it), beside ctxwindow's other caches."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ctxwindow" / "datasets"


def source_url(dataset: PublicDataset) -> str:
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    return f"{mirror.rstrip('/')}/{dataset.file_name}" if mirror else dataset.url


def fetch(dataset: PublicDataset, say: Callable[[str], None] = print) -> Path:
    """The local copy of ``dataset``: fetched on first use, its sha256 checked every
    time; ``say`` is told where it came from and under which licence."""
    folder = cache_folder() / dataset.name
    path = folder / dataset.file_name
    recorded = path.with_name(path.name + ".sha256")
    if path.is_file():
        expected = dataset.sha256 or _read_recorded(recorded)
        found = _sha256_of(path)
        if expected is not None and found != expected:
            raise ConfigError(
                f"the cached {dataset.name} file {str(path)!r} has sha256 {found}, not "
                f"{expected}: it changed since it was fetched; delete it to fetch it again"
            )
        say(f"{dataset.name}: {dataset.what}; licence {dataset.licence}; cached at {path}")
        return path
    url = source_url(dataset)
    say(f"{dataset.name}: fetching {url}")
    folder.mkdir(parents=True, exist_ok=True)
    found = _download(url, path, dataset)
    if dataset.sha256 is None:
        recorded.write_text(found + "\n", encoding="utf-8")
        check = (
            f"sha256 {found} (no hash is pinned in this release: recorded, and checked "
            "on later uses)"
        )
    else:
        check = f"sha256 {found} checked"
    say(
        f"{dataset.name}: {dataset.what}; from {url}; licence {dataset.licence}; "
        f"{check}; saved to {path}"
    )
    return path


def _download(url: str, path: Path, dataset: PublicDataset) -> str:
    """Fetch ``url`` to ``path`` (whole or not at all); the sha256 of what came."""
    digest = hashlib.sha256()
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with (
            os.fdopen(handle, "wb") as out,
            urllib.request.urlopen(url, timeout=TIMEOUT_S) as response,
        ):
            while chunk := response.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
        found = digest.hexdigest()
        if dataset.sha256 is not None and found != dataset.sha256:
            raise ConfigError(
                f"{dataset.name} from {url} has sha256 {found}, not {dataset.sha256}: "
                f"not the published file (a changed mirror, or a broken download); nothing "
                f"was saved"
            )
        os.replace(partial, path)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise ConfigError(
            f"cannot fetch {dataset.name} from {url}: {reason}; set {MIRROR_ENV} to a base "
            f"URL that serves {dataset.file_name}, or give the path of a copy"
        ) from None
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return found


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_recorded(recorded: Path) -> str | None:
    try:
        return recorded.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
