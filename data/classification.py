"""Sequence classification on the bundled Bible corpus: which part of the Bible a verse comes from.

Each example is one verse (in ``language``, "en" or "es") and a label:
- ``label="testament"``: 0 = Old Testament (Gen-Mal, 39 books), 1 = New Testament (Matt-Rev, 27 books);
- ``label="book_group"``: the 8 traditional groups — Law, History, Wisdom, Major Prophets, Minor Prophets,
  Gospels and Acts, Epistles, Revelation.
Splits are the translation corpus's (whole chapters by hash, ``data.builders.bible_es_en``), so no chapter
is split between training and evaluation. A SentencePiece model is trained on the training verses.

Batches: ``inputs [B, T]`` int32 (piece ids, then EOS, then PAD), ``inputs_segmentation [B, T]`` (1 on real
tokens, 0 on padding), ``label [B]`` int32; padding rows (to fill a device multiple) have segmentation 0
everywhere and label 0, and carry no weight. Training batches are shuffled per epoch (seeded, exact resume).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import ml_collections
import numpy as np

from data import bible, loader, splits
from data.errors import DataError
from data.tokenizer import EOS_ID, Tokenizer, cached_tokenizer, tokenizer_key

LABELS = ("testament", "book_group")
BOOK_GROUPS = (
    ("law", ("Gen", "Exod", "Lev", "Num", "Deut")),
    ("history", ("Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr", "Ezra", "Neh", "Esth")),
    ("wisdom", ("Job", "Ps", "Prov", "Eccl", "Song")),
    ("major_prophets", ("Isa", "Jer", "Lam", "Ezek", "Dan")),
    ("minor_prophets", ("Hos", "Joel", "Amos", "Obad", "Jonah", "Mic", "Nah", "Hab", "Zeph", "Hag", "Zech",
                        "Mal")),
    ("gospels_acts", ("Matt", "Mark", "Luke", "John", "Acts")),
    ("epistles", ("Rom", "1Cor", "2Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim", "2Tim", "Titus",
                  "Phlm", "Heb", "Jas", "1Pet", "2Pet", "1John", "2John", "3John", "Jude")),
    ("revelation", ("Rev",)),
)
_GROUP_OF = {book: g for g, (_, books) in enumerate(BOOK_GROUPS) for book in books}
_FIRST_NT_GROUP = 5


def default_classification_config() -> ml_collections.ConfigDict:
    """Default data config of the classification task; every field is documented inline."""
    c = ml_collections.ConfigDict()
    c.label = "testament"  # testament (2 classes) | book_group (8 classes)
    c.language = "en"  # en | es: which side of the corpus the verses come from
    c.vocab_size = 4000  # SentencePiece vocabulary (ids 0-3 are PAD, EOS, BOS, UNK)
    c.max_len = 64  # tokens per verse including EOS (longer verses are truncated)
    c.batch_size = 32  # global rows per batch
    c.eval_batch_size = 64
    c.batch_multiple = 0  # batch sizes must divide by this; 0 = jax.device_count()
    c.cache_dir = ""  # tokenizer cache ("" = ~/.cache/attnlab)
    c.prefetch = 2
    return c


def validate_classification_config(cfg: ml_collections.ConfigDict) -> None:
    """DataError naming the field for an impossible setting."""
    if cfg.label not in LABELS:
        raise DataError(f"config.data.label={cfg.label!r}; expected one of {LABELS}")
    if cfg.language not in bible.LANGUAGES:
        raise DataError(f"config.data.language={cfg.language!r}; expected one of {bible.LANGUAGES}")
    for name in ("vocab_size", "max_len", "batch_size", "eval_batch_size"):
        if not isinstance(cfg[name], int) or cfg[name] <= 0:
            raise DataError(f"config.data.{name}={cfg[name]!r}; expected a positive int")
    if cfg.max_len < 2:
        raise DataError(f"config.data.max_len={cfg.max_len}; expected >= 2 (a token and EOS)")


def label_of(book: str, label: str) -> int:
    """The class of a verse of ``book`` under ``label`` ("testament" or "book_group")."""
    group = _GROUP_OF[book]
    return int(group >= _FIRST_NT_GROUP) if label == "testament" else group


def class_names(label: str) -> tuple[str, ...]:
    return ("old_testament", "new_testament") if label == "testament" else tuple(g for g, _ in BOOK_GROUPS)


@dataclasses.dataclass
class ClassificationData:
    """Encoded verses per split, their labels, and batching."""

    config: ml_collections.ConfigDict
    tokenizer: Tokenizer
    texts: dict[str, list[str]]
    ids: dict[str, list[list[int]]]
    labels: dict[str, np.ndarray]
    seed: int
    process_index: int
    process_count: int
    multiple: int

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def num_classes(self) -> int:
        return len(class_names(self.config.label))

    @property
    def class_names(self) -> tuple[str, ...]:
        return class_names(self.config.label)

    def make_batch(self, split: str, indices, rows: int) -> dict[str, np.ndarray]:
        """Examples ``indices`` of ``split`` as a [rows, max_len] batch (rows past the examples: padding)."""
        T = self.config.max_len
        batch = {"inputs": np.zeros((rows, T), np.int32), "inputs_segmentation": np.zeros((rows, T), np.int32),
                 "label": np.zeros((rows,), np.int32)}
        for r, i in enumerate(indices):
            tokens = self.ids[split][i]
            batch["inputs"][r, :len(tokens)] = tokens
            batch["inputs_segmentation"][r, :len(tokens)] = 1
            batch["label"][r] = self.labels[split][i]
        return batch

    def _plan(self, epoch: int) -> list:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.ids["train"]))
        B = self.config.batch_size
        per_host = B // self.process_count
        lo = self.process_index * per_host
        return [order[s:s + B][lo:lo + per_host].tolist() for s in range(0, len(order) - B + 1, B)]

    def train_iter(self):
        """Checkpointable iterator over shuffled training batches, epoch after epoch."""
        per_host = self.config.batch_size // self.process_count
        fingerprint = hashlib.sha256(json.dumps([self.seed, self.config.to_dict(), len(self.ids["train"])],
                                                sort_keys=True).encode()).hexdigest()[:16]
        return loader.epoch_iterator(self._plan, lambda idx: self.make_batch("train", idx, per_host), fingerprint,
                                     self.config.prefetch)

    def eval_batches(self, split: str) -> list[dict[str, np.ndarray]]:
        """Every example of ``split`` once, in order, in batches of ``eval_batch_size`` rows (this host's)."""
        self._check_split(split)
        B = self.config.eval_batch_size
        n = len(self.ids[split])
        per_host = B // self.process_count
        out = []
        for s in range(0, n, B):
            idx = list(range(s, min(s + B, n)))[self.process_index * per_host:(self.process_index + 1) * per_host]
            out.append(self.make_batch(split, idx, per_host))
        return out

    def examples(self, split: str) -> list[tuple[str, int]]:
        """(verse text, label) of every example of ``split``."""
        self._check_split(split)
        return list(zip(self.texts[split], self.labels[split].tolist()))

    def _check_split(self, split: str) -> None:
        if split not in splits.SPLITS:
            raise DataError(f"split must be one of {splits.SPLITS}; got {split!r}")

    def describe(self) -> str:
        counts = {s: np.bincount(self.labels[s], minlength=self.num_classes).tolist() for s in splits.SPLITS}
        return (f"data: Bible verse classification by {self.config.label} ({self.config.language}), "
                f"{self.num_classes} classes {list(self.class_names)}, examples per class {counts}, vocab "
                f"{self.vocab_size}, max_len {self.config.max_len}")

    @property
    def stats(self) -> dict:
        return {s: {"examples": len(self.ids[s]),
                    "per_class": np.bincount(self.labels[s], minlength=self.num_classes).tolist()}
                for s in splits.SPLITS}


def build_classification(cfg: ml_collections.ConfigDict, *, workdir: str | None, seed: int,
                         process_index: int = 0, process_count: int = 1) -> ClassificationData:
    """Reads the bundled corpus, splits it by chapter, trains or reuses the tokenizer and encodes every split."""
    validate_classification_config(cfg)
    cfg = ml_collections.ConfigDict(cfg.to_dict())
    multiple = loader.resolve_batch_multiple(cfg.batch_multiple)
    for name in ("batch_size", "eval_batch_size"):
        if cfg[name] % multiple or cfg[name] % process_count:
            raise DataError(f"config.data.{name}={cfg[name]} must be divisible by {multiple} (batch_multiple, "
                             f"default the device count) and by the {process_count} processes")
    rows = bible.read_pairs(bible.CORPUS_PATH)
    lang = bible.LANGUAGES.index(cfg.language)
    texts: dict[str, list[str]] = {s: [] for s in splits.SPLITS}
    labels: dict[str, list[int]] = {s: [] for s in splits.SPLITS}
    for book, chapter, _, *sides in rows:
        split = bible.chapter_split(book, chapter)
        texts[split].append(sides[lang])
        labels[split].append(label_of(book, cfg.label))
    cache_dir = cfg.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "attnlab")
    settings = {"vocab_size": cfg.vocab_size, "model_type": "bpe"}
    key = tokenizer_key(f"bible_es_en/{cfg.language}/train", settings)
    tok, _ = cached_tokenizer(key, f"classification_{cfg.language}", lambda: texts["train"], cache_dir=cache_dir,
                              workdir=workdir, **settings)
    ids = {s: [t[:cfg.max_len - 1] + [EOS_ID] for t in tok.encode_batch(texts[s])] for s in splits.SPLITS}
    return ClassificationData(cfg, tok, texts, ids, {s: np.asarray(v, np.int32) for s, v in labels.items()}, seed,
                              process_index, process_count, multiple)
