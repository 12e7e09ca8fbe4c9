"""Data for attnlab: parallel corpora, SentencePiece, fixed-shape batches, synthetic attention tasks.

    import data
    cfg = data.default_translation_config()          # Spanish -> English Bible, offline
    ds = data.build_translation(cfg, workdir="runs/x", seed=0)
    it = ds.train_iter()                             # grain iterator: next(it), it.get_state(), it.set_state(s)
    batch = next(it)                                 # inputs/targets [B, L] + *_segmentation, *_position
    ds.eval_batches("test"), ds.examples("test"), ds.tokenizer.decode(ids)

    syn = data.build_synthetic(data.default_synthetic_config(), seed=0)   # copy/reverse/sort/mqar/induction
    cls = data.build_classification(data.default_classification_config(), workdir=None, seed=0)  # verse -> testament

Token ids are fixed: PAD_ID=0, EOS_ID=1, BOS_ID=2, UNK_ID=3.
"""
from data.classification import ClassificationData, build_classification, default_classification_config
from data.synthetic import SyntheticData, build_synthetic, default_synthetic_config
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from data.translation import TranslationData, build_translation, default_translation_config

__all__ = [
    "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID",
    "ClassificationData", "SyntheticData", "Tokenizer", "TranslationData",
    "build_classification", "build_synthetic", "build_translation", "default_classification_config",
    "default_synthetic_config", "default_translation_config",
]
