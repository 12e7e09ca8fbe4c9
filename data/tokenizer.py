"""SentencePiece tokenizers with fixed special ids, trained on a training split and cached.

Special ids (fixed for every tokenizer this package trains, and the defaults the models use):

    PAD_ID = 0   padding; never produced by `encode`
    EOS_ID = 1   end of sequence; the batching code appends it to every input and target
    BOS_ID = 2   beginning of sequence; `models.shift_right` puts it at each decoder segment start
    UNK_ID = 3   unknown piece

`Tokenizer.encode` returns plain piece ids (no BOS/EOS); `Tokenizer.decode` stops at the first EOS and skips
PAD/BOS, so model outputs decode directly.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from data.errors import DataError

PAD_ID = 0
EOS_ID = 1
BOS_ID = 2
UNK_ID = 3
NUM_SPECIAL_IDS = 4

MODEL_TYPES = ("unigram", "bpe")


class Tokenizer:
    """A SentencePiece model whose ids 0-3 are PAD, EOS, BOS, UNK."""

    def __init__(self, model_path: str):
        if not os.path.exists(model_path):
            raise FileNotFoundError(f"SentencePiece model {model_path} does not exist")
        self.path = model_path
        self._sp = spm.SentencePieceProcessor(model_file=model_path)
        expected = {"<pad>": PAD_ID, "</s>": EOS_ID, "<s>": BOS_ID, "<unk>": UNK_ID}
        for piece, idx in expected.items():
            if self._sp.piece_to_id(piece) != idx:
                raise ValueError(f"{model_path}: piece {piece!r} has id {self._sp.piece_to_id(piece)}, "
                                 f"expected {idx} (PAD=0, EOS=1, BOS=2, UNK=3)")

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Piece ids of `text`, without BOS or EOS."""
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 0) -> list[list[int]]:
        """`encode` for many texts at once (C++ threads; 0 = all cores)."""
        return self._sp.encode(list(texts), num_threads=num_threads or (os.cpu_count() or 1))

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of `ids` up to the first EOS; PAD and BOS are skipped."""
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(int(i))
        return self._sp.decode(out)

    def decode_batch(self, ids: np.ndarray | Sequence[Sequence[int]]) -> list[str]:
        """`decode` for each row of a [B, T] array or list of id lists."""
        return [self.decode(row) for row in ids]

    def id_to_piece(self, idx: int) -> str:
        return self._sp.id_to_piece(int(idx))


def train_tokenizer(texts: Iterable[str], model_path: str, *, vocab_size: int, model_type: str = "bpe",
                    max_sentences: int = 1_000_000, character_coverage: float = 1.0, seed: int = 0) -> Tokenizer:
    """Trains a SentencePiece model on `texts` and writes it to `model_path` (atomically).

    Deterministic for identical inputs and settings (single training thread, fixed sampling seed), so every
    host of a multi-host job trains the same model. `max_sentences` caps the sentences sampled for training.
    """
    if model_type not in MODEL_TYPES:
        raise DataError(f"data.spm_model_type={model_type!r}; expected one of {MODEL_TYPES}")
    if vocab_size <= NUM_SPECIAL_IDS:
        raise DataError(f"data.vocab_size={vocab_size}; expected > {NUM_SPECIAL_IDS} (the special ids)")
    sentences = [t for t in texts if t]
    if not sentences:
        raise DataError("cannot train a tokenizer on an empty training split")
    spm.set_random_generator_seed(seed)
    proto = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=proto, vocab_size=vocab_size, model_type=model_type,
            pad_id=PAD_ID, eos_id=EOS_ID, bos_id=BOS_ID, unk_id=UNK_ID, character_coverage=character_coverage,
            input_sentence_size=max_sentences, shuffle_input_sentence=True, num_threads=1, minloglevel=2)
    except RuntimeError as e:
        most = re.search(r"Vocabulary size too high .*value <= (\d+)", str(e))
        if most:
            raise DataError(f"data.vocab_size={vocab_size} is too large for the training split: SentencePiece "
                            f"({model_type}) can make at most {most.group(1)} pieces from its {len(sentences)} "
                            f"sentences; set data.vocab_size <= {most.group(1)} or use more data") from None
        raise DataError(f"SentencePiece training failed for data.vocab_size={vocab_size}, "
                        f"data.spm_model_type={model_type!r} on {len(sentences)} sentences: "
                        f"{' '.join(str(e).split())}") from e
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    _atomic_write(model_path, proto.getvalue())
    return Tokenizer(model_path)


def tokenizer_key(corpus_id: str, settings: dict) -> str:
    """A short stable hash of what determines a tokenizer: the corpus and the training settings."""
    blob = json.dumps({"corpus": corpus_id, **settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cached_tokenizer(key: str, name: str, texts_fn, *, cache_dir: str, workdir: str | None,
                     **train_kwargs) -> tuple[Tokenizer, bool]:
    """The tokenizer `name` for `key`: from `workdir` if the run already has it, else from the cache, else
    trained on `texts_fn()` (only called when training). Copies it into `workdir/tokenizer/`.

    Returns (tokenizer, trained_now). Raises DataError if `workdir` holds a tokenizer with another key. A
    damaged copy in `workdir` (a model or metadata file that does not load) is rebuilt from the cache with a
    warning when the cache has this key's model, else refused naming the file.
    """
    cache_path = os.path.join(cache_dir, "tokenizers", key, f"{name}.model")
    if workdir:
        run_dir = os.path.join(workdir, "tokenizer")
        run_path = os.path.join(run_dir, f"{name}.model")
        meta_path = os.path.join(run_dir, f"{name}.json")
        if os.path.exists(run_path):
            try:
                with open(meta_path) as f:
                    meta = json.load(f)
                if not isinstance(meta, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as e:
                meta = _damaged(meta_path, f"{type(e).__name__}: {e}", cache_path)
            if meta is not None:
                if meta.get("key") != key:
                    raise DataError(f"{run_path} was trained with other data settings (key {meta.get('key')}, "
                                    f"now {key}: {json.dumps(meta.get('settings'))}); use a fresh --workdir or "
                                    f"the original data config")
                try:
                    return Tokenizer(run_path), False
                except (RuntimeError, OSError, ValueError) as e:
                    _damaged(run_path, " ".join(str(e).split()), cache_path)
    trained = not os.path.exists(cache_path)
    tokenizer = train_tokenizer(texts_fn(), cache_path, **train_kwargs) if trained else Tokenizer(cache_path)
    if workdir:
        os.makedirs(run_dir, exist_ok=True)
        # Metadata first, each file through its own temporary name: concurrent callers (several hosts on one
        # workdir) never collide, and whoever sees the model also finds its metadata.
        _atomic_write(meta_path, json.dumps({"key": key, "settings": train_kwargs}, indent=2).encode())
        with open(cache_path, "rb") as f:
            _atomic_write(run_path, f.read())
        tokenizer = Tokenizer(run_path)
    return tokenizer, trained


def _damaged(path: str, why: str, cache_path: str) -> None:
    """A damaged tokenizer file of a run: a warning when the cache can rebuild it (returns None, so the caller
    copies the cached model again), else DataError naming the file."""
    import logging

    if not os.path.exists(cache_path):
        raise DataError(f"tokenizer file {path} is damaged ({why[:200]}) and the tokenizer cache has no copy "
                        f"({cache_path}); restore the file, or start a fresh --workdir")
    logging.getLogger("attnlab").warning("tokenizer file %s is damaged (%s); rebuilding it from the cache %s",
                                         path, why[:200], cache_path)
    return None


def _atomic_write(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
