"""TFDS builders that live in this package (TFDS finds builders by importing their module)."""
from data.builders.bible_es_en import BibleEsEn, CORPUS_PATH

__all__ = ["BibleEsEn", "CORPUS_PATH"]
