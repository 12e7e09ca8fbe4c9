"""Decoding speed with and without the KV cache.

    python scripts/bench_decode.py                       # CPU-sized model, output length 128
    python scripts/bench_decode.py --d_model=512 --num_heads=8 --d_ff=2048 --layers=6 --batch=32

Both loops decode greedily for exactly ``--length`` steps (no early stop at EOS, so the work is fixed):
- cached: ``EncoderDecoder.decode_step`` on one new token per step, self-attention keys/values kept in the
  cache and cross-attention keys/values computed once;
- uncached: the whole decoder re-run on the ``[B, length]`` prefix buffer at every step (the causal mask makes
  the unfilled positions irrelevant), the logits at the current position taken.
Also times ``models.greedy_decode`` and ``models.beam_search`` (which stop early once every row has ended).
Reports generated tokens per second (batch * length / seconds), best of ``--repeats`` after a compile run.
"""
from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp
from flax import nnx

import models
from attention.benchmark import best_time_ms


def _timed(fn, repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn()`` after a warm-up (compiling) call."""
    return best_time_ms(fn, repeats=repeats) / 1e3


@functools.partial(jax.jit, static_argnames=("graphdef", "length"))
def cached_loop(graphdef, state, inputs, *, length: int) -> jax.Array:
    model = nnx.merge(graphdef, state)
    seg = (inputs != model.cfg.pad_id).astype(jnp.int32)
    cache = model.init_cache(model.encode(inputs, inputs_segmentation=seg), seg, length)
    B = inputs.shape[0]

    def body(i, carry):
        tokens, last, cache = carry
        logits, cache = model.decode_step(last, cache, i)
        nxt = jnp.argmax(logits, -1).astype(jnp.int32)
        return tokens.at[:, i].set(nxt), nxt, cache

    init = (jnp.zeros((B, length), jnp.int32), jnp.full((B,), model.cfg.bos_id, jnp.int32), cache)
    return jax.lax.fori_loop(0, length, body, init)[0]


@functools.partial(jax.jit, static_argnames=("graphdef", "length"))
def uncached_loop(graphdef, state, inputs, *, length: int) -> jax.Array:
    model = nnx.merge(graphdef, state)
    seg = (inputs != model.cfg.pad_id).astype(jnp.int32)
    encoded = model.encode(inputs, inputs_segmentation=seg)
    B = inputs.shape[0]
    target_seg = jnp.ones((B, length), jnp.int32)

    def body(i, tokens):
        logits = model.decode(encoded, tokens, inputs_segmentation=seg, targets_segmentation=target_seg)
        nxt = jax.lax.dynamic_index_in_dim(logits, i, axis=1, keepdims=False).argmax(-1).astype(jnp.int32)
        return tokens.at[:, i].set(nxt)

    return jax.lax.fori_loop(0, length, body, jnp.zeros((B, length), jnp.int32))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--d_model", type=int, default=256)
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--d_ff", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--source_len", type=int, default=32)
    p.add_argument("--length", type=int, default=128, help="output length")
    p.add_argument("--beam_size", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--attention_impl", default="auto")
    p.add_argument("--skip_search", action="store_true", help="time only the fixed-length loops")
    args = p.parse_args()

    cfg = models.TransformerConfig(
        vocab_size=args.vocab_size, d_model=args.d_model, num_heads=args.num_heads, d_ff=args.d_ff,
        num_encoder_layers=args.layers, num_decoder_layers=args.layers, dropout_rate=0.0,
        max_len=max(args.length, args.source_len), attention_impl=args.attention_impl,
    )
    model = models.EncoderDecoder(cfg, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    inputs = jax.random.randint(jax.random.PRNGKey(1), (args.batch, args.source_len), 3, cfg.vocab_size)
    tokens = args.batch * args.length
    print(f"backend={jax.default_backend()} devices={jax.device_count()} params={models.count_params(model):,} "
          f"batch={args.batch} source_len={args.source_len} output_len={args.length}")

    with_cache = _timed(lambda: cached_loop(graphdef, state, inputs, length=args.length), args.repeats)
    without = _timed(lambda: uncached_loop(graphdef, state, inputs, length=args.length), args.repeats)
    same = bool(jnp.all(cached_loop(graphdef, state, inputs, length=args.length)
                        == uncached_loop(graphdef, state, inputs, length=args.length)))
    print(f"{'KV cache':<22}{tokens / with_cache:>12.0f} tokens/s  ({with_cache:.3f} s)")
    print(f"{'no cache (recompute)':<22}{tokens / without:>12.0f} tokens/s  ({without:.3f} s)")
    print(f"speed-up {without / with_cache:.1f}x; same tokens: {same}")
    if not args.skip_search:
        greedy = _timed(lambda: models.greedy_decode(model, inputs, max_len=args.length), args.repeats)
        beam = _timed(lambda: models.beam_search(model, inputs, beam_size=args.beam_size, max_len=args.length),
                      args.repeats)
        print(f"{'greedy_decode':<22}{greedy:>12.3f} s (stops when every row has emitted EOS)")
        print(f"{'beam_search k=' + str(args.beam_size):<22}{beam:>12.3f} s")


if __name__ == "__main__":
    from engine import cli

    cli.script(main)
