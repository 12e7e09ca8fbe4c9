"""The Spanish-English Bible corpus committed in `data/corpora/bible_es_en/`, without TFDS: its path, reader and
chapter splits (whole chapters, assigned by hashing "Book.Chapter" with `data.splits.assign_split`, salt
"bible_es_en": 4% test, 3% validation, the rest train). The TFDS builder is `data.builders.BibleEsEn`."""
from __future__ import annotations

import gzip
import os

from data import splits

CORPUS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpora", "bible_es_en", "pairs.tsv.gz")
SPLIT_SALT = "bible_es_en"
VALIDATION_FRACTION = 0.03
TEST_FRACTION = 0.04
LANGUAGES = ("es", "en")


def read_pairs(path: str) -> list[tuple[str, int, int, str, str]]:
    """Rows (book, chapter, verse, es, en) of the committed TSV, checked against its header."""
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header != ["book", "chapter", "verse", *LANGUAGES]:
            raise ValueError(f"{path}: header {header}, expected book, chapter, verse, {', '.join(LANGUAGES)}")
        rows = []
        for line_no, line in enumerate(f, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5 or not fields[3] or not fields[4]:
                raise ValueError(f"{path}:{line_no}: expected 5 non-empty tab-separated fields")
            rows.append((fields[0], int(fields[1]), int(fields[2]), fields[3], fields[4]))
    return rows


def chapter_split(book: str, chapter: int) -> str:
    """The split of every verse of `book` `chapter`."""
    return splits.assign_split(f"{book}.{chapter}", salt=SPLIT_SALT, validation_fraction=VALIDATION_FRACTION,
                               test_fraction=TEST_FRACTION)
