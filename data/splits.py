"""Deterministic train/validation/test assignment by hashing a group key.

Examples that share a group key always land in the same split, so near-duplicates inside a group (verses of
one Bible chapter, repeated sentences of a bring-your-own corpus) cannot leak from training into evaluation.
The assignment depends only on the key, the salt and the fractions: it is stable across runs, machines and
Python versions.
"""
from __future__ import annotations

import hashlib

from data.errors import DataError

SPLITS = ("train", "validation", "test")


def unit_hash(key: str, salt: str) -> float:
    """A uniform number in [0, 1) from sha256(salt:key)."""
    digest = hashlib.sha256(f"{salt}:{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_split(key: str, *, salt: str, validation_fraction: float, test_fraction: float) -> str:
    """'test' if the key's hash < test_fraction, else 'validation' if < test + validation, else 'train'."""
    if not (0.0 <= test_fraction and 0.0 <= validation_fraction and test_fraction + validation_fraction < 1.0):
        raise DataError(f"split fractions must be >= 0 and sum to < 1; got validation={validation_fraction}, "
                        f"test={test_fraction}")
    u = unit_hash(key, salt)
    if u < test_fraction:
        return "test"
    if u < test_fraction + validation_fraction:
        return "validation"
    return "train"
