"""TFDS builder for the Spanish-English Bible corpus committed in `data/corpora/bible_es_en/`.

Generates from the committed `pairs.tsv.gz` (no download). Splits are whole chapters, assigned by hashing
"Book.Chapter" (`data.bible.chapter_split`): 4% test, 3% validation, the rest train. The reader and split
constants live in `data.bible` (no TFDS import) and are re-exported here. Read it without TensorFlow:

    builder = BibleEsEn(data_dir=..., file_format="array_record")
    builder.download_and_prepare()
    source = builder.as_data_source()["test"]   # source[i] == {"es": b"...", "en": b"...", "ref": b"Gen.1.1"}
"""
from __future__ import annotations

import tensorflow_datasets as tfds

from data import splits
from data.bible import (CORPUS_PATH, LANGUAGES, SPLIT_SALT, TEST_FRACTION, VALIDATION_FRACTION, chapter_split,
                        read_pairs)

__all__ = ["BibleEsEn", "CORPUS_PATH", "LANGUAGES", "SPLIT_SALT", "TEST_FRACTION", "VALIDATION_FRACTION",
           "chapter_split", "read_pairs"]


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
