"""TFDS builder for the Spanish-English Bible corpus committed in `data/corpora/bible_es_en/`.

Generates from the committed `pairs.tsv.gz` (no download). Splits are whole chapters, assigned by hashing
"Book.Chapter" (`data.splits.assign_split`, salt "bible_es_en"): 4% test, 3% validation, the rest train.
Read it without TensorFlow:

    builder = BibleEsEn(data_dir=..., file_format="array_record")
    builder.download_and_prepare()
    source = builder.as_data_source()["test"]   # source[i] == {"es": b"...", "en": b"...", "ref": b"Gen.1.1"}
"""
from __future__ import annotations

import gzip
import os

import tensorflow_datasets as tfds

from data import splits

CORPUS_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpora", "bible_es_en",
                           "pairs.tsv.gz")
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


class BibleEsEn(tfds.core.GeneratorBasedBuilder):
    """Verse-aligned Reina-Valera 1909 (Spanish) and World English Bible (English), both public domain."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "30,761 verse pairs from sword-text-sparv 2.60-1 and sword-text-web 426.0-1."}
    CORPUS = CORPUS_PATH

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict({
                "es": tfds.features.Text(),
                "en": tfds.features.Text(),
                "ref": tfds.features.Text(),  # "Book.Chapter.Verse", OSIS book ids
            }),
            supervised_keys=("es", "en"),
            homepage="https://ebible.org/",
        )

    def _split_generators(self, dl_manager):
        rows = read_pairs(self.CORPUS)
        by_split = {name: [] for name in splits.SPLITS}
        for row in rows:
            by_split[chapter_split(row[0], row[1])].append(row)
        return {name: self._generate_examples(split_rows) for name, split_rows in by_split.items() if split_rows}

    def _generate_examples(self, rows):
        for book, chapter, verse, es, en in rows:
            ref = f"{book}.{chapter}.{verse}"
            yield ref, {"es": es, "en": en, "ref": ref}
