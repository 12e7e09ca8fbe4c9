"""Random-weight checkpoints of each family built with ``transformers`` (PyTorch, CPU), for tests and benchmarks.

``make(family, directory)`` writes ``config.json``, ``model.safetensors`` and the family's own tokenizer files
(trained here on the Bible corpus's first verses: byte-level BPE for GPT-2 and Llama, WordPiece for BERT,
SentencePiece + ``vocab.json`` for Marian), exactly as ``save_pretrained`` writes a real checkpoint. Needs
``pip install '.[reference]'`` (torch, transformers). Weights are drawn with a larger scale than the
families' initializers so that attention is peaked and greedy generation is not trivially repetitive.
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Optional

FAMILIES = ("gpt2", "llama", "qwen2", "marian", "bert")
_CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "corpora",
                       "bible_es_en", "pairs.tsv.gz")


def corpus_lines(n: int = 2000, side: str = "en") -> list[str]:
    """The first ``n`` verses of the committed Bible corpus (``side``: "en" or "es")."""
    col = {"es": 3, "en": 4}[side]
    out = []
    with gzip.open(_CORPUS, "rt", encoding="utf-8") as f:
        next(f)
        for line in f:
            out.append(line.rstrip("\n").split("\t")[col])
            if len(out) >= n:
                break
    return out


def _train_bpe(directory: str, vocab: int, family: str) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>"] if family == "gpt2" else ["<unk>", "<s>", "</s>"]
    tok.train_from_iterator(corpus_lines(), trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if family == "gpt2":
        wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    else:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    wrapped.save_pretrained(directory)
    return tok.get_vocab_size()


def _train_wordpiece(directory: str, vocab: int) -> int:
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(corpus_lines(), vocab_size=vocab)
    BertTokenizerFast(tokenizer_object=tok._tokenizer).save_pretrained(directory)
    return tok.get_vocab_size()


def _train_marian(directory: str, vocab: int) -> int:
    import sentencepiece as spm
    from transformers import MarianTokenizer

    os.makedirs(directory, exist_ok=True)
    text = os.path.join(directory, "corpus.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(corpus_lines(side="es") + corpus_lines(side="en")))
    prefix = os.path.join(directory, "spm")
    spm.SentencePieceTrainer.train(input=text, model_prefix=prefix, vocab_size=vocab, model_type="unigram",
                                   bos_id=-1, eos_id=1, unk_id=2, pad_id=-1, minloglevel=2)
    os.remove(text)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    pieces = ["</s>", "<unk>"] + [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                                  if sp.id_to_piece(i) not in ("</s>", "<unk>")] + ["<pad>"]
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(pieces)}, f, ensure_ascii=False)
    for side in ("source", "target"):
        with open(prefix + ".model", "rb") as src, open(os.path.join(directory, f"{side}.spm"), "wb") as dst:
            dst.write(src.read())
    os.remove(prefix + ".model")
    os.remove(prefix + ".vocab")
    MarianTokenizer(os.path.join(directory, "source.spm"), os.path.join(directory, "target.spm"),
                    os.path.join(directory, "vocab.json")).save_pretrained(directory)
    return len(pieces)


def make(family: str, directory: str, *, d_model: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
         d_ff: int = 128, vocab: int = 400, seed: int = 0, weight_scale: float = 0.2,
         config_overrides: Optional[dict] = None, tokenizer: bool = True) -> str:
    """Write a random-weight ``family`` checkpoint (one of ``FAMILIES``) to ``directory``; returns it.

    vocab: the tokenizer's target size (the model's vocabulary is the trained tokenizer's); with
    ``tokenizer=False`` no tokenizer is written and the model has exactly ``vocab`` tokens.
    config_overrides: extra ``transformers`` config fields. weight_scale: std of every weight matrix and
    embedding (norm scales stay 1, biases get a tenth of it; 0 keeps the family's own initialization).
    """
    import torch
    import transformers as T

    if family not in FAMILIES:
        raise ValueError(f"family={family!r}; expected one of {FAMILIES}")
    os.makedirs(directory, exist_ok=True)
    if tokenizer:
        if family in ("gpt2", "llama", "qwen2"):
            vocab = _train_bpe(directory, vocab, "gpt2" if family == "gpt2" else "llama")
        else:
            vocab = _train_wordpiece(directory, vocab) if family == "bert" else _train_marian(directory, vocab)
    extra = dict(config_overrides or {})
    if family == "gpt2":
        cfg = T.GPT2Config(**{**dict(vocab_size=vocab, n_positions=128, n_embd=d_model, n_layer=layers, n_head=heads,
                                     n_inner=d_ff, bos_token_id=0, eos_token_id=0), **extra})
        cls = T.GPT2LMHeadModel
    elif family in ("llama", "qwen2"):
        klass = T.LlamaConfig if family == "llama" else T.Qwen2Config
        cfg = klass(**{**dict(vocab_size=vocab, hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=layers,
                              num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
                              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                              **({"rope_theta": 500000.0} if family == "llama" else {})), **extra})
        cls = T.LlamaForCausalLM if family == "llama" else T.Qwen2ForCausalLM
    elif family == "marian":
        cfg = T.MarianConfig(**{**dict(
            vocab_size=vocab, decoder_vocab_size=vocab, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
            encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff,
            activation_function="swish", scale_embedding=True, pad_token_id=vocab - 1, decoder_start_token_id=vocab - 1,
            eos_token_id=0, forced_eos_token_id=None, max_position_embeddings=256), **extra})
        cls = T.MarianMTModel
    else:
        cfg = T.BertConfig(**{**dict(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=d_ff, max_position_embeddings=128),
                              **extra})
        cls = T.BertForSequenceClassification if extra.get("num_labels") else T.BertForMaskedLM
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters() if weight_scale else ():
            if "norm" in name.lower() or "ln_" in name:
                continue
            p.normal_(0.0, weight_scale if p.ndim > 1 else weight_scale / 10)
        if family == "marian" and weight_scale:
            model.final_logits_bias.normal_(0.0, weight_scale)
    model.save_pretrained(directory)
    return directory
