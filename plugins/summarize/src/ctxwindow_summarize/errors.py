"""Why a summary could not be written: the core's SummarizerFailed, re-exported."""

from ctxwindow.errors import SummarizerFailed

__all__ = ["SummarizerFailed"]
