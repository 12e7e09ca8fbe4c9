"""Tokenizers from a checkpoint's own files, so token ids match the reference implementation's tokenizer.

``tokenizer.json`` (GPT-2, Llama, Qwen2, BERT: the ``tokenizers`` library) or Marian's ``source.spm`` /
``target.spm`` + ``vocab.json`` (SentencePiece pieces looked up in the shared vocabulary, EOS appended).
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence


class PretrainedTokenizer:
    """encode(text) -> ids (with the checkpoint's special tokens), decode(ids) -> text, id_to_piece(i)."""

    def __init__(self, directory: str):
        self.directory = directory
        self._fast = None
        path = os.path.join(directory, "tokenizer.json")
        if os.path.exists(path):
            from tokenizers import Tokenizer

            self._fast = Tokenizer.from_file(path)
            self.vocab_size = self._fast.get_vocab_size(with_added_tokens=True)
            return
        spm = [os.path.join(directory, f) for f in ("source.spm", "target.spm", "vocab.json")]
        if not all(os.path.exists(f) for f in spm):
            raise FileNotFoundError(f"no tokenizer in {directory}: expected tokenizer.json, or Marian's "
                                    f"source.spm, target.spm and vocab.json")
        import sentencepiece

        self._source, self._target = (sentencepiece.SentencePieceProcessor(model_file=f) for f in spm[:2])
        with open(spm[2], encoding="utf-8") as f:
            self._vocab: dict[str, int] = json.load(f)
        self._pieces = {i: p for p, i in self._vocab.items()}
        config = {}
        config_path = os.path.join(directory, "tokenizer_config.json")
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        if config.get("separate_vocabs"):
            raise ValueError(f"{directory}: a Marian tokenizer with separate source and target vocabularies "
                             f"(separate_vocabs) is not supported")
        self._unk = self._vocab[config.get("unk_token", "<unk>")]
        self._eos = self._vocab[config.get("eos_token", "</s>")]
        self._special = {self._vocab[t] for t in (config.get("eos_token", "</s>"), config.get("pad_token", "<pad>"))
                         if t in self._vocab}
        self.vocab_size = max(self._vocab.values()) + 1

    def encode(self, text: str, *, target: bool = False) -> list[int]:
        """Token ids of ``text``, special tokens included (Marian: ``target`` uses the target-side model)."""
        if self._fast is not None:
            return self._fast.encode(text).ids
        code = []
        if text.startswith(">>") and "<<" in text:  # Marian's multilingual target-language code
            end = text.find("<<") + 2
            code, text = [text[:end]], text[end:]
        pieces = code + (self._target if target else self._source).encode(text, out_type=str)
        return [self._vocab.get(p, self._unk) for p in pieces] + [self._eos]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` without special tokens."""
        ids = [int(i) for i in ids]
        if self._fast is not None:
            return self._fast.decode(ids, skip_special_tokens=True)
        pieces = [self._pieces.get(i, "") for i in ids if i not in self._special]
        return self._target.decode_pieces(pieces).strip()

    def id_to_piece(self, i: int) -> str:
        if self._fast is not None:
            return self._fast.id_to_token(int(i)) or ""
        return self._pieces.get(int(i), "")


def load_tokenizer(directory: str) -> Optional[PretrainedTokenizer]:
    """The checkpoint's tokenizer, or None when the directory has no tokenizer files."""
    try:
        return PretrainedTokenizer(directory)
    except FileNotFoundError:
        return None
