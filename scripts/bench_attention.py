"""Benchmark the attention backends: forward and forward+backward time, peak memory and TFLOP/s per length
(what is measured and how: ``attention/benchmark.py``).

    python scripts/bench_attention.py --out bench/attention             # CPU default: 256 .. 16k, f32, causal
    python scripts/bench_attention.py --seq-lens 1024 4096 --no-causal --dtype bfloat16 --stats
    python scripts/bench_attention.py --compare-mha --seq-lens 1024 4096 16384   # on a GPU

Writes ``bench_attention.csv`` and ``bench_attention.png`` into ``--out`` and prints the table.
"""
from attention.benchmark import main

if __name__ == "__main__":
    from engine import cli

    cli.script(main)
