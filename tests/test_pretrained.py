"""Pretrained checkpoints against the reference implementation (``transformers``, PyTorch CPU), float32.

Random-weight checkpoints of each family are written with ``transformers`` and loaded by ``pretrained.load``:
logits on padded batches per backend, greedy generation, KV-cache decoding, head masks, attention weights and
tokenizer ids must agree. Skipped without torch/transformers (``pip install '.[test,pretrained,reference]'``).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install '.[reference]')")
transformers = pytest.importorskip("transformers", reason="needs transformers (pip install '.[reference]')")
pytest.importorskip("safetensors", reason="needs safetensors (pip install '.[pretrained]')")

import jax.numpy as jnp  # noqa: E402

import models  # noqa: E402
import pretrained  # noqa: E402
from pretrained import random_checkpoints  # noqa: E402

RTOL = 1e-4
# Backends that take segment-id padding masks (and causal masks) on CPU.
BACKENDS = ("reference", "xla", "chunked")
DECODERS = ("gpt2", "llama", "qwen2")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    out = {f: random_checkpoints.make(f, str(root / f)) for f in random_checkpoints.FAMILIES}
    # 2 labels, the default: transformers writes no id2label into config.json then
    out["bert_cls"] = random_checkpoints.make("bert", str(root / "bert_cls"), config_overrides={"num_labels": 2})
    return out


def _reference(directory: str, family: str):
    classes = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
               "qwen2": transformers.Qwen2ForCausalLM, "marian": transformers.MarianMTModel,
               "bert": transformers.BertForMaskedLM, "bert_cls": transformers.BertForSequenceClassification}
    return classes[family].from_pretrained(directory, attn_implementation="eager").eval()


def _batch(vocab: int, lengths=(9, 5, 7), seed=0, low=3):
    """Right-padded ids [B, T] (padding 0 for the mask only) and the mask [B, T]."""
    rng = np.random.default_rng(seed)
    T = max(lengths)
    ids = rng.integers(low, vocab - 2, (len(lengths), T))
    mask = (np.arange(T)[None] < np.array(lengths)[:, None]).astype(np.int64)
    return ids, mask


def _max_rel(ours: np.ndarray, ref: np.ndarray, where: np.ndarray) -> float:
    """Largest |ours - ref| over real positions, relative to the largest |ref| there."""
    diff = np.abs(ours - ref)[where.astype(bool)]
    return float(diff.max() / np.abs(ref[where.astype(bool)]).max())


def _decoder_logits(model, ids, mask, **kw):
    return np.asarray(model(jnp.asarray(ids), segmentation=jnp.asarray(mask), **kw))


@pytest.mark.parametrize("family", DECODERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_decoder_logits_match(checkpoints, family, backend):
    p = pretrained.load(checkpoints[family], attention_impl=backend)
    ids, mask = _batch(p.cfg.vocab_size)
    with torch.no_grad():
        ref = _reference(checkpoints[family], family)(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    assert _max_rel(_decoder_logits(p.model, ids, mask), ref, mask) <= RTOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_marian_logits_match(checkpoints, backend):
    p = pretrained.load(checkpoints["marian"], attention_impl=backend)
    pad = p.cfg.pad_id
    src, src_mask = _batch(p.cfg.vocab_size, (8, 4, 6), seed=1)
    tgt, tgt_mask = _batch(p.cfg.vocab_size, (7, 7, 3), seed=2)
    src, tgt = np.where(src_mask, src, pad), np.where(tgt_mask, tgt, pad)
    dec_in = np.concatenate([np.full((3, 1), p.cfg.bos_id), tgt[:, :-1]], axis=1)
    with torch.no_grad():
        ref = _reference(checkpoints["marian"], "marian")(
            input_ids=torch.tensor(src), attention_mask=torch.tensor(src_mask), decoder_input_ids=torch.tensor(dec_in),
            decoder_attention_mask=torch.tensor(tgt_mask)).logits.numpy()
    ours = np.asarray(p.model(jnp.asarray(src), jnp.asarray(tgt)))
    assert _max_rel(ours, ref, tgt_mask) <= RTOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_bert_mlm_and_classifier_match(checkpoints, backend):
    p = pretrained.load(checkpoints["bert"], attention_impl=backend)
    ids, mask = _batch(p.cfg.vocab_size, seed=3)
    ids = np.where(mask, ids, p.cfg.pad_id)
    types = (np.arange(ids.shape[1])[None] >= 3).astype(np.int64) * mask
    with torch.no_grad():
        ref = _reference(checkpoints["bert"], "bert")(torch.tensor(ids), attention_mask=torch.tensor(mask),
                                                       token_type_ids=torch.tensor(types)).logits.numpy()
    ours = np.asarray(p.model(jnp.asarray(ids), token_types=jnp.asarray(types)))
    assert _max_rel(ours, ref, mask) <= RTOL
    c = pretrained.load(checkpoints["bert_cls"], attention_impl=backend)
    assert c.model.num_classes == 2
    with torch.no_grad():
        ref = _reference(checkpoints["bert_cls"], "bert_cls")(torch.tensor(ids), attention_mask=torch.tensor(mask),
                                                               token_type_ids=torch.tensor(types)).logits.numpy()
    ours = np.asarray(c.model.classify(jnp.asarray(ids), token_types=jnp.asarray(types)))
    assert np.abs(ours - ref).max() / np.abs(ref).max() <= RTOL


@pytest.mark.parametrize("family", ("gpt2", "llama"))
def test_decoder_greedy_generation_matches(checkpoints, family):
    p = pretrained.load(checkpoints[family])
    ids, _ = _batch(p.cfg.vocab_size, (6, 6), seed=4)
    ref_model = _reference(checkpoints[family], family)
    with torch.no_grad():
        ref = ref_model.generate(torch.tensor(ids), attention_mask=torch.ones_like(torch.tensor(ids)),
                                 max_new_tokens=20, min_new_tokens=20, do_sample=False, num_beams=1,
                                 pad_token_id=p.cfg.pad_id, eos_token_id=None).numpy()[:, ids.shape[1]:]
    ours = np.asarray(models.lm_greedy_decode(p.model, jnp.asarray(ids), max_new_tokens=20))
    np.testing.assert_array_equal(ours, ref)
    assert len(set(ref[0].tolist())) > 2  # not a degenerate repetition


@pytest.mark.parametrize("family", DECODERS)
@pytest.mark.parametrize("beams", (1, 4))
def test_left_padded_prompts_match_generate(checkpoints, family, beams):
    """Prompts of lengths 9, 4, 6 left-padded to 9: token-identical to ``generate`` with the same padding
    (greedy), and each row equal to its prompt decoded alone (greedy and beam-4)."""
    p = pretrained.load(checkpoints[family])
    lengths = (9, 4, 6)
    ids, mask = _batch(p.cfg.vocab_size, lengths, seed=8)
    ids, mask = ids[:, ::-1].copy(), mask[:, ::-1].copy()  # right padding mirrored: left padding
    filler = p.cfg.vocab_size - 1
    ids = np.where(mask == 1, ids, filler)
    if beams == 1:
        decode = lambda x, m=None: models.lm_greedy_decode(p.model, jnp.asarray(x), max_new_tokens=12,  # noqa: E731
                                                           prompt_mask=m)
        with torch.no_grad():
            ref = _reference(checkpoints[family], family).generate(
                torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=12, min_new_tokens=12,
                do_sample=False, num_beams=1, pad_token_id=filler, eos_token_id=None).numpy()[:, ids.shape[1]:]
    else:
        decode = lambda x, m=None: models.lm_beam_search(p.model, jnp.asarray(x), beam_size=beams,  # noqa: E731
                                                         max_new_tokens=12, prompt_mask=m)
    ours = np.asarray(decode(ids, jnp.asarray(mask)))
    if beams == 1:
        np.testing.assert_array_equal(ours, ref)
    for row, n in enumerate(lengths):
        alone = np.asarray(decode(ids[row:row + 1, ids.shape[1] - n:]))
        np.testing.assert_array_equal(ours[row], alone[0])


def test_prompt_mask_errors(checkpoints):
    p = pretrained.load(checkpoints["gpt2"])
    ids = jnp.ones((2, 4), jnp.int32)
    with pytest.raises(ValueError, match="prompt_mask row 1 is \\[1, 1, 0, 1\\]"):
        models.lm_greedy_decode(p.model, ids, max_new_tokens=2, prompt_mask=jnp.asarray([[0, 1, 1, 1], [1, 1, 0, 1]]))
    with pytest.raises(ValueError, match="prompt_mask must have the prompt's shape"):
        models.lm_beam_search(p.model, ids, beam_size=2, max_new_tokens=2, prompt_mask=jnp.ones((2, 3)))


def test_marian_greedy_generation_matches(checkpoints):
    p = pretrained.load(checkpoints["marian"])
    src, src_mask = _batch(p.cfg.vocab_size, (8, 5), seed=5)
    src = np.where(src_mask, src, p.cfg.pad_id)
    with torch.no_grad():
        ref = _reference(checkpoints["marian"], "marian").generate(
            torch.tensor(src), attention_mask=torch.tensor(src_mask), max_new_tokens=20, min_new_tokens=20,
            do_sample=False, num_beams=1, eos_token_id=None).numpy()[:, 1:]
    ours = np.asarray(models.greedy_decode(p.model, jnp.asarray(src), max_len=20))
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("family", ("gpt2", "llama", "marian"))
def test_kv_cache_decoding_equals_full_forward(checkpoints, family):
    p = pretrained.load(checkpoints[family])
    m = p.model
    if family == "marian":
        src, _ = _batch(p.cfg.vocab_size, (6, 6), seed=6)
        tgt, _ = _batch(p.cfg.vocab_size, (8, 8), seed=7)
        full = np.asarray(m(jnp.asarray(src), jnp.asarray(tgt)))
        dec_in = np.concatenate([np.full((2, 1), p.cfg.bos_id), tgt[:, :-1]], axis=1)
        cache = m.init_cache(m.encode(jnp.asarray(src)), jnp.ones(src.shape, jnp.int32), 8)
    else:
        dec_in, _ = _batch(p.cfg.vocab_size, (8, 8), seed=7)
        full = np.asarray(m(jnp.asarray(dec_in)))
        cache = m.init_cache(2, 8)
    steps = []
    for i in range(8):
        logits, cache = m.decode_step(jnp.asarray(dec_in[:, i]), cache, i)
        steps.append(np.asarray(logits))
    np.testing.assert_allclose(np.stack(steps, 1), full, rtol=0, atol=RTOL * np.abs(full).max())


@pytest.mark.parametrize("family", ("gpt2", "llama", "marian", "bert"))
def test_head_mask_equals_zeroed_output_rows(checkpoints, family):
    """Masking head h of layer l equals the reference with that head's rows of the output projection zeroed."""
    layer, head = 1, 2
    p = pretrained.load(checkpoints[family])
    ref_model = _reference(checkpoints[family], family)
    D = p.cfg.v_dim
    with torch.no_grad():
        if family == "gpt2":
            w = ref_model.transformer.h[layer].attn.c_proj.weight  # Conv1D [in, out]
            w[head * D:(head + 1) * D, :] = 0
        else:
            proj = {"llama": lambda: ref_model.model.layers[layer].self_attn.o_proj,
                    "marian": lambda: ref_model.model.decoder.layers[layer].self_attn.out_proj,
                    "bert": lambda: ref_model.bert.encoder.layer[layer].attention.output.dense}[family]()
            proj.weight[:, head * D:(head + 1) * D] = 0
    group = {"gpt2": "decoder_self", "llama": "decoder_self", "marian": "decoder_self", "bert": "encoder_self"}[family]
    masks = models.unit_head_mask(p.model)
    masks[group] = masks[group].at[layer, head].set(0.0)
    iv = models.Interventions(head_mask=masks)
    ids, mask = _batch(p.cfg.vocab_size, (7, 7), seed=8)
    with torch.no_grad():
        if family == "marian":
            dec_in = np.concatenate([np.full((2, 1), p.cfg.bos_id), ids[:, :-1]], axis=1)
            ref = ref_model(input_ids=torch.tensor(ids), decoder_input_ids=torch.tensor(dec_in)).logits.numpy()
            ours = np.asarray(p.model(jnp.asarray(ids), jnp.asarray(ids), interventions=iv))
        else:
            ref = ref_model(torch.tensor(ids)).logits.numpy()
            ours = np.asarray(p.model(jnp.asarray(ids), interventions=iv))
    assert _max_rel(ours, ref, mask) <= RTOL
    assert _max_rel(np.asarray(p.model(jnp.asarray(ids), **({} if family != "marian" else {}))
                               if family != "marian" else p.model(jnp.asarray(ids), jnp.asarray(ids))), ref, mask) > 1e-3


@pytest.mark.parametrize("family", ("gpt2", "llama", "marian", "bert"))
def test_reference_backend_weights_equal_output_attentions(checkpoints, family):
    p = pretrained.load(checkpoints[family], attention_impl="reference")
    ref_model = _reference(checkpoints[family], family)
    ids, mask = _batch(p.cfg.vocab_size, (7, 4), seed=9)
    tmask = torch.tensor(mask)
    with torch.no_grad():
        if family == "marian":
            src = np.where(mask, ids, p.cfg.pad_id)
            dec_in = np.concatenate([np.full((2, 1), p.cfg.bos_id), ids[:, :-1]], axis=1)
            out = ref_model(input_ids=torch.tensor(src), attention_mask=tmask, decoder_input_ids=torch.tensor(dec_in),
                            output_attentions=True)
            _, stats = p.model(jnp.asarray(src), jnp.asarray(ids), targets_segmentation=jnp.ones_like(jnp.asarray(ids)),
                               return_stats=True)
            pairs = (("encoder_self", out.encoder_attentions, mask[:, :, None] * mask[:, None, :]),
                     ("decoder_self", out.decoder_attentions, np.ones((2, 7, 7))),
                     ("cross", out.cross_attentions, np.ones((2, 7, 1)) * mask[:, None, :]))
        else:
            src = np.where(mask, ids, p.cfg.pad_id)
            out = ref_model(torch.tensor(src), attention_mask=tmask, output_attentions=True)
            if family == "bert":
                _, stats = p.model(jnp.asarray(src), return_stats=True)
                pairs = (("encoder_self", out.attentions, mask[:, :, None] * mask[:, None, :]),)
            else:
                _, stats = p.model(jnp.asarray(src), segmentation=jnp.asarray(mask), return_stats=True)
                pairs = (("decoder_self", out.attentions, mask[:, :, None] * mask[:, None, :]),)
    for group, ref_layers, where in pairs:
        assert len(stats[group]) == len(ref_layers)
        for s, r in zip(stats[group], ref_layers):
            w = np.broadcast_to(where[:, None].astype(bool), r.shape)
            np.testing.assert_allclose(np.asarray(s.weights)[w], r.numpy()[w], atol=1e-5)


@pytest.mark.parametrize("family", random_checkpoints.FAMILIES)
def test_tokenizer_ids_match(checkpoints, family):
    ours = pretrained.load(checkpoints[family]).tokenizer
    ref = transformers.AutoTokenizer.from_pretrained(checkpoints[family])
    for text in random_checkpoints.corpus_lines(40)[-5:] + random_checkpoints.corpus_lines(40, "es")[-5:]:
        assert ours.encode(text) == ref(text)["input_ids"], text


def test_rope_scaling_llama3_matches(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
    d = random_checkpoints.make("llama", str(tmp_path / "l3"), tokenizer=False, vocab=64, d_model=128, heads=2,
                                config_overrides={"rope_scaling": scaling})
    p = pretrained.load(d)
    assert dict(p.cfg.rope_scaling)["rope_type"] == "llama3"
    ids, mask = _batch(64, (40, 30), seed=10)
    with torch.no_grad():
        ref = _reference(d, "llama")(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    assert _max_rel(_decoder_logits(p.model, ids, mask), ref, mask) <= RTOL


@pytest.mark.parametrize("family,overrides,field", [
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling.rope_type='yarn'"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 16}, "sliding_window=16"),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
    ("bert", {"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
])
def test_unsupported_config_names_the_field(tmp_path, family, overrides, field):
    d = random_checkpoints.make(family, str(tmp_path / family), tokenizer=False, vocab=64, layers=1,
                                config_overrides=overrides)
    with pytest.raises(pretrained.UnsupportedCheckpoint, match=field.replace("[", r"\[")):
        pretrained.load(d)


def test_alibi_and_unknown_family_are_named():
    with pytest.raises(pretrained.UnsupportedCheckpoint, match="alibi"):
        pretrained.model_config({"model_type": "bloom", "alibi": True})
    with pytest.raises(pretrained.UnsupportedCheckpoint, match="model_type='t5'"):
        pretrained.model_config({"model_type": "t5"})


def test_sharded_loading_over_a_mesh(checkpoints):
    """With a mesh, heads and the MLP hidden dimension are split over "model"; the logits do not change."""
    import jax
    from jax.sharding import Mesh

    if len(jax.devices()) < 4:
        pytest.skip("needs 4 devices (tests/conftest.py simulates 8 CPU devices)")
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
    sharded = pretrained.load(checkpoints["llama"], mesh=mesh)
    kernel = sharded.model.decoder.layers[0].self_attention.key.kernel[...]
    assert kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model", None)
    assert len({str(s.index) for s in kernel.addressable_shards}) == 2  # two distinct halves of the kv heads
    plain = pretrained.load(checkpoints["llama"])
    ids, mask = _batch(plain.cfg.vocab_size, seed=11)
    np.testing.assert_allclose(_decoder_logits(sharded.model, ids, mask), _decoder_logits(plain.model, ids, mask),
                               rtol=1e-5, atol=1e-5)


def test_legacy_layernorm_names_load(checkpoints, tmp_path):
    """Older BERT files spell LayerNorm parameters gamma / beta (bert-base-uncased); they load the same."""
    import shutil

    from safetensors.numpy import load_file, save_file

    d = tmp_path / "bert_old"
    shutil.copytree(checkpoints["bert"], d)
    tensors = load_file(str(d / "model.safetensors"))
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in tensors.items()}
    assert renamed.keys() != tensors.keys()
    save_file(renamed, str(d / "model.safetensors"))
    ids = jnp.asarray(_batch(pretrained.load(checkpoints["bert"]).cfg.vocab_size, seed=12)[0])
    np.testing.assert_array_equal(pretrained.load(str(d)).model(ids), pretrained.load(checkpoints["bert"]).model(ids))


def test_checkpoint_mismatch_names_the_tensor(checkpoints, tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    d = tmp_path / "gpt2_cut"
    shutil.copytree(checkpoints["gpt2"], d)
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    tensors["transformer.h.0.attn.extra.weight"] = np.zeros(3, np.float32)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(pretrained.CheckpointMismatch, match=r"transformer\.h\.1\.mlp\.c_fc\.weight"):
        pretrained.load(str(d))
    del tensors["transformer.h.0.attn.extra.weight"]
    tensors["transformer.h.1.mlp.c_fc.weight"] = np.zeros((3, 3), np.float32)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(pretrained.CheckpointMismatch, match="shape"):
        pretrained.load(str(d))
