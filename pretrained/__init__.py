"""Pretrained checkpoints (GPT-2, Llama / Qwen2-style, Marian, BERT) as attnlab NNX models.

``load(path_or_hub_id)`` reads ``config.json`` and ``*.safetensors`` (a local directory in the standard
layout, or a hub id fetched with ``huggingface_hub.snapshot_download``; one code path after the download),
maps the config onto ``models.TransformerConfig`` (``pretrained.families``), converts the weights
(``pretrained.convert``) onto the attention backend of the caller's choice and loads the checkpoint's own
tokenizer (``pretrained.tokenizer``). With ``mesh`` the parameters are placed shard by shard with the
engine's tensor-parallel rules (``engine.state.DEFAULT_RULES``), so a model larger than one device loads.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import time
from typing import Optional

from flax import nnx

import models
from pretrained.convert import CheckpointMismatch, build_model
from pretrained.families import FAMILIES, UnsupportedCheckpoint, family_of, model_config
from pretrained.tokenizer import PretrainedTokenizer, load_tokenizer

__all__ = ["CheckpointMismatch", "FAMILIES", "Pretrained", "PretrainedTokenizer", "UnsupportedCheckpoint",
           "family_of", "load", "model_config", "resolve"]


@dataclasses.dataclass
class Pretrained:
    """A loaded checkpoint: ``model`` (DecoderOnly / EncoderDecoder / EncoderOnly), its ``cfg``, ``family``,
    ``tokenizer`` (None when the directory has none), the directory, the raw ``config.json`` and the load time."""

    model: nnx.Module
    cfg: models.TransformerConfig
    family: str
    tokenizer: Optional[PretrainedTokenizer]
    directory: str
    hf_config: dict
    load_seconds: float


def resolve(path_or_id: str) -> str:
    """A local checkpoint directory: ``path_or_id`` itself when it is a directory, else a hub id downloaded
    (config, safetensors and tokenizer files only) with ``huggingface_hub.snapshot_download``."""
    if os.path.isdir(path_or_id):
        return path_or_id
    if os.path.exists(path_or_id):
        raise ValueError(f"{path_or_id} is a file; expected a checkpoint directory or a hub id")
    if path_or_id.startswith(("/", ".", "~")) or path_or_id.count("/") > 1:
        raise ValueError(f"no checkpoint directory {path_or_id} (and it is not a hub id like 'org/name')")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ValueError(f"{path_or_id!r} is not a local directory, and huggingface_hub (pip install "
                         f"'.[pretrained]') is needed to download it") from None
    try:
        return snapshot_download(path_or_id, allow_patterns=["*.json", "*.safetensors", "*.spm", "*.model",
                                                             "*.txt"])
    except Exception as e:  # the hub client raises many types (offline, unknown repo, auth)
        raise ValueError(f"cannot download {path_or_id!r} from the hub: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None


def _tensor_reader(directory: str):
    """(names, name -> numpy array) over every ``*.safetensors`` shard of ``directory``."""
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    if not files:
        raise CheckpointMismatch(f"no *.safetensors in {directory} (attnlab reads safetensors only; convert a "
                                 f"pytorch_model.bin with transformers' save_pretrained)")
    from safetensors import safe_open

    where = {}
    for f in files:
        with safe_open(f, framework="numpy") as h:
            for name in h.keys():
                where[name] = f

    def read(name: str):
        with safe_open(where[name], framework="numpy") as h:
            return h.get_tensor(name)

    return set(where), read


def load(path_or_id: str, *, attention_impl: str = "auto", dtype: str = "float32", num_classes: Optional[int] = None,
         mesh=None) -> Pretrained:
    """Load a checkpoint into attnlab (see the module docstring).

    attention_impl: an ``attention`` backend or "auto"; dtype: parameter and computation dtype; num_classes:
    BERT's classification head (None: the rows of the checkpoint's classifier, if it has one);
    mesh: a ``jax.sharding.Mesh`` with a "model" axis to shard the parameters over (None: default device).
    Errors: ``UnsupportedCheckpoint`` (a config field attnlab does not implement, before any weight is read),
    ``CheckpointMismatch`` (tensors disagree with the config), ``ValueError`` (no such directory or hub id).
    """
    start = time.perf_counter()
    directory = resolve(path_or_id)
    config_path = os.path.join(directory, "config.json")
    if not os.path.exists(config_path):
        raise CheckpointMismatch(f"no config.json in {directory}")
    with open(config_path, encoding="utf-8") as f:
        hf = json.load(f)
    family, cfg = model_config(hf, attention_impl=attention_impl, dtype=dtype)
    names, read = _tensor_reader(directory)
    if num_classes is None:
        # the head's own rows: transformers leaves id2label out of config.json for the default 2 labels
        num_classes = int(read("classifier.weight").shape[0]) if "classifier.weight" in names else 0
    place = None
    if mesh is not None:
        from jax.sharding import NamedSharding

        from engine import sharding
        from engine.state import DEFAULT_RULES

        rules = DEFAULT_RULES if dict(mesh.shape).get(sharding.MODEL, 1) > 1 else ()
        place = lambda path, shape: NamedSharding(mesh, sharding.spec_for(path, shape, mesh, rules))  # noqa: E731
    model = build_model(family, cfg, read, names, num_classes=num_classes, sharding=place)
    return Pretrained(model=model, cfg=cfg, family=family, tokenizer=load_tokenizer(directory), directory=directory,
                      hf_config=hf, load_seconds=time.perf_counter() - start)
