"""The retry delays live in rsc/common/backoff.py (one backoff for both sides); re-exported here."""

from rsc.common.backoff import Backoff

__all__ = ["Backoff"]
