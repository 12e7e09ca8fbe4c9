"""Data for attnlab: parallel corpora, SentencePiece, fixed-shape batches, synthetic attention tasks.

    import data
    cfg = data.default_translation_config()          # Spanish -> English Bible, offline
    ds = data.build_translation(cfg, workdir="runs/x", seed=0)
    it = ds.train_iter()                             # grain iterator: next(it), it.get_state(), it.set_state(s)
    batch = next(it)                                 # inputs/targets [B, L] + *_segmentation, *_position
    ds.eval_batches("test"), ds.examples("test"), ds.tokenizer.decode(ids)

    syn = data.build_synthetic(data.default_synthetic_config(), seed=0)   # copy/reverse/sort/mqar/induction
    cls = data.build_classification(data.default_classification_config(), workdir=None, seed=0)  # verse -> testament

    data.check_config(cfg)                           # seconds: fields, options, files / datasets exist

Token ids are fixed: PAD_ID=0, EOS_ID=1, BOS_ID=2, UNK_ID=3. Every data problem a user can cause raises
``data.DataError`` (a ValueError) with a one-line message naming the config field.
"""
import ml_collections

from data.classification import (ClassificationData, build_classification, default_classification_config,
                                 validate_classification_config)
from data.errors import DataError
from data.synthetic import SyntheticData, build_synthetic, default_synthetic_config, validate_synthetic_config
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from data.translation import (TranslationData, build_translation, check_translation_sources,
                              default_translation_config, validate_translation_config)


def check_config(cfg: ml_collections.ConfigDict) -> None:
    """Raises DataError unless ``cfg`` (a translation, classification or synthetic data config, told apart by
    its ``source`` / ``label`` fields) has known fields and options and every source it names exists: what the
    builders would fail on first, checked in seconds without reading a corpus or training a tokenizer."""
    if "source" in cfg:
        validate_translation_config(cfg)
        check_translation_sources(cfg)
    elif "label" in cfg:
        validate_classification_config(cfg)
    else:
        validate_synthetic_config(cfg)


__all__ = [
    "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID",
    "ClassificationData", "DataError", "SyntheticData", "Tokenizer", "TranslationData",
    "build_classification", "build_synthetic", "build_translation", "check_config", "default_classification_config",
    "default_synthetic_config", "default_translation_config",
]
