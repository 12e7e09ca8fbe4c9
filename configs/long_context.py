"""Long context with context parallelism: a decoder-only model on multi-query associative recall (MQAR) at
16,384 tokens, the sequence split over 8 devices (``mesh.context = 8``) and attended with ring attention.

Each device holds seq_len / context tokens of every row (activations, their gradients, one K/V block in
hand); the ``ring`` attention backend passes the K/V blocks around the ``context`` axis, so no device ever
holds the full sequence or a [T, T] score matrix (``scripts/bench_ring.py`` prints the memory per device vs
sequence length). The sequence reaches the devices in the zig-zag layout (``mesh.context_layout``: device r
holds chunks r and 2N-1-r of 2N), so every device has the same causal work in every ring step; ``layout=natural``
keeps natural order (device r then sees r + 1 key blocks and the ring waits for the last device).

    python train.py --config=configs/long_context.py                       # 16k tokens on 8 accelerators
    python train.py --config=configs/long_context.py:seq_len=32768,pairs=1024
    python train.py --config=configs/long_context.py:quick                 # 256 tokens, 8 simulated CPU devices

Arguments: seq_len, context (devices on the sequence axis; the rest of the devices shard the batch), pairs
(MQAR key-value pairs, all queried; 4 * pairs <= seq_len), steps, block (ring tiles inside a device), layout
(zigzag or natural; natural with context 1), quick
(a 1-layer width-32 model at 256 tokens, a few steps: a smoke test for CPUs with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``).
"""
from engine.config import parse_arg, sibling_config

small_decoder_config = sibling_config(__file__, "_presets").small_decoder_config


def get_config(arg=None):
    a = parse_arg(arg, seq_len=16384, context=8, pairs=256, steps=2000, block=512, layout="zigzag",
                  quick=False)
    q = a.quick
    seq_len = 256 if q else a.seq_len
    steps = min(a.steps, 4) if q else a.steps
    c = small_decoder_config(
        "mqar", quick=q, d_model=32 if q else 128, heads=2 if q else 4, layers=1 if q else 2,
        learning_rate=1e-3, steps=steps, batch_size=2 if q else 8, seq_len=seq_len, vocab=64 if q else 8192,
        log_every=1 if q else 20, num_eval_batches=1 if q else 4)
    c.data.mqar_num_kv_pairs = 8 if q else a.pairs
    c.model.position = "rope"  # no table of seq_len positions
    c.model.attention_impl = "ring"
    c.model.attention_options = {"block_q": 16 if q else a.block, "block_k": 16 if q else a.block}
    c.mesh.data = -1
    c.mesh.context = a.context
    c.mesh.context_layout = a.layout if a.context > 1 else "natural"
    c.wandb.tags = ("long_context", "mqar", "ring")
    return c
