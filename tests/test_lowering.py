"""Lowering for accelerators on a CPU-only machine: ``jax.export`` for ``platforms=["cuda"]`` and ``["tpu"]``.

Nothing here runs a kernel; each test traces and lowers a program for a GPU or TPU and reads the exported
StableHLO. What it checks:

- the ``pallas`` backend (``interpret=False``, ``kernel="gpu"|"tpu"``) forward, forward with statistics and
  backward (vjp) lower to Triton (``__gpu$xla.gpu.triton``) and Mosaic (``tpu_custom_call``) kernels, over a
  pairwise grid of dtype x head dim x GQA/MQA x mask (causal, window, separate q/kv segment ids) x lengths
  (Tq != Tk) x pass; the kernels present are exactly the forward one, or the forward, dq and dk/dv ones, and
  the GPU launch grid follows the block sizes;
- the whole translation and decoder-only train steps with ``attention_impl="pallas"`` or ``"cudnn"`` and
  ``dtype="bfloat16"`` lower for CUDA with those kernels inside;
- the platform defaults: TPU blocks are multiples of 128, the GPU kernels' head-dim limits, and
  ``implementation="auto"`` in a program lowered for a GPU or TPU picks the kernel ``auto_order`` names.

A program meant for a GPU is traced on this machine with ``jax.default_backend()`` answering "gpu" (what the
attention registry asks), the cuDNN version and compute capability answered as an H200's (jax asks the
installed CUDA libraries at trace time), and the Pallas Triton lowering pointed at an abstract H200.
"""
from __future__ import annotations

import collections
import contextlib
import importlib.util
import itertools
import os
import re
import warnings

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractDevice, AbstractMesh

import attention
from attention import Mask, flash

TRITON = "__gpu$xla.gpu.triton"
MOSAIC = "tpu_custom_call"
CUDNN_PREFIX = "__cudnn$fmha"
# jax.export refuses custom calls without a compatibility guarantee unless told which ones to allow.
_UNSTABLE_TARGETS = (TRITON, "__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward", "__cudnn$fmhaScaleBiasSoftmax",
                     "__cudnn$fmhaScaleBiasSoftmaxBackward")
H200 = AbstractDevice(device_kind="NVIDIA H200", num_cores=132, platform="gpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The backend options of an explicit, non-interpreted kernel per export platform. TPU blocks: multiples of 128.
KERNEL_OPTIONS = {
    "cuda": {"interpret": False, "kernel": "gpu", "block_q": 64, "block_k": 64},
    "tpu": {"interpret": False, "kernel": "tpu", "block_q": 128, "block_k": 128},
}
KERNEL_NAMES = {  # platform -> pass -> the pallas kernels the lowered program must hold
    "cuda": {"fwd": {"attnlab_flash_fwd"}, "vjp": {"attnlab_flash_fwd", "attnlab_flash_dq", "attnlab_flash_dkv"}},
    "tpu": {"fwd": {"attnlab_flash_fwd_tpu"},
            "vjp": {"attnlab_flash_fwd_tpu", "attnlab_flash_dq_tpu", "attnlab_flash_dkv_tpu"}},
}
KERNEL_TARGET = {"cuda": TRITON, "tpu": MOSAIC}


# ------------------------------------------------------------------------------------------------ helpers
@contextlib.contextmanager
def target_platform(platform: str):
    """Trace as if on ``platform`` ("cuda" or "tpu"): ``jax.default_backend()`` (what the attention registry
    asks) names it, and jax's cuDNN checks find an H200's cuDNN 9.10 and compute capability 9.0."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_lib

    name = "gpu" if platform == "cuda" else platform
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jax, "default_backend", lambda: name)
        if platform == "cuda":
            mp.setattr(cudnn_lib, "check_cudnn_version", lambda: 91000)
            mp.setattr(cudnn_lib, "check_compute_capability", lambda c: tuple(map(int, c.split("."))) <= (9, 0))
            mp.setattr(cudnn_lib, "is_cuda_compute_capability_equal", lambda c: c == "9.0")
        yield


def _abstract_device(platform: str):
    """jax >= 0.11 lowers Pallas Triton kernels only for a known GPU: an abstract H200 (harmless on 0.10)."""
    if platform != "cuda":
        return contextlib.nullcontext()
    auto = (jax.sharding.AxisType.Auto,) * 2
    return jax.sharding.use_abstract_mesh(AbstractMesh((1, 1), ("data", "model"), axis_types=auto,
                                                       abstract_device=H200))


def export(fn, platform: str, *args) -> jax.export.Exported:
    """``jax.export`` of ``jit(fn)`` for one platform, allowing the Triton and cuDNN custom calls."""
    checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in _UNSTABLE_TARGETS]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Pallas Triton backend is deprecated.*")
        with _abstract_device(platform):
            return jax.export.export(jax.jit(fn), platforms=[platform], disabled_checks=checks)(*args)


_CALL = re.compile(r"stablehlo\.custom_call @([\w$.]+)\(")
_NAME = re.compile(r'\b(?:kernel_)?name = "([\w.]+)"')


def custom_calls(exported: jax.export.Exported) -> collections.Counter:
    """(target, kernel name or "") of every custom call in the exported module, with counts."""
    found = collections.Counter()
    for line in exported.mlir_module().splitlines():
        m = _CALL.search(line)
        if m:
            name = _NAME.search(line)
            found[(m.group(1), name.group(1) if name else "")] += 1
    return found


def kernel_names(exported: jax.export.Exported, target: str) -> set[str]:
    return {name for (t, name) in custom_calls(exported) if t == target}


def gpu_grids(exported: jax.export.Exported) -> dict[str, tuple[int, int, int]]:
    """Launch grid (x, y, z) of each Triton kernel, by kernel name."""
    grids = {}
    for line in exported.mlir_module().splitlines():
        if f"@{TRITON}(" in line:
            name = _NAME.search(line).group(1)
            grids[name] = tuple(int(re.search(rf"grid_{a} = (\d+)", line).group(1)) for a in "xyz")
    return grids


def pairwise(factors: dict[str, tuple]) -> list[dict]:
    """A small set of rows from the product of ``factors`` covering every pair of levels of any two factors
    (greedy; deterministic)."""
    names = list(factors)
    uncovered = {((a, x), (b, y)) for a, b in itertools.combinations(names, 2)
                 for x in factors[a] for y in factors[b]}
    rows = []
    candidates = [dict(zip(names, values)) for values in itertools.product(*factors.values())]
    while uncovered:
        def gain(row):
            return sum(((a, row[a]), (b, row[b])) in uncovered for a, b in itertools.combinations(names, 2))
        best = max(candidates, key=gain)
        rows.append(best)
        uncovered -= {((a, best[a]), (b, best[b])) for a, b in itertools.combinations(names, 2)}
    return rows


# ------------------------------------------------------------------------------------------------ kernels
GRID = pairwise({
    "mask": ("causal", "window", "segments", "causal_segments"),
    "head_dim": (64, 128, 256),
    "pass": ("fwd", "stats", "vjp"),
    "dtype": ("bfloat16", "float32"),
    "heads": ((4, 2), (4, 1)),  # GQA, MQA
    "lengths": ((256, 256), (200, 328)),  # Tq == Tk, Tq != Tk (neither a multiple of the blocks)
})


def _case_id(c: dict) -> str:
    return (f"{c['pass']}-{c['dtype'][:4]}-d{c['head_dim']}-{'gqa' if c['heads'][1] > 1 else 'mqa'}-{c['mask']}-"
            f"q{c['lengths'][0]}k{c['lengths'][1]}")


def _mask(kind: str, B: int, Tq: int, Tk: int) -> Mask:
    q_seg = jnp.ones((B, Tq), jnp.int32).at[:, Tq - 16:].set(0)
    kv_seg = jnp.ones((B, Tk), jnp.int32).at[:, Tk // 2:].set(2)
    return {
        "causal": lambda: Mask(causal=True),
        "window": lambda: Mask(window=(64, 0)),
        "segments": lambda: Mask(q_segment_ids=q_seg, kv_segment_ids=kv_seg),
        "causal_segments": lambda: Mask(causal=True, q_segment_ids=q_seg, kv_segment_ids=kv_seg),
    }[kind]()


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("case", GRID, ids=_case_id)
def test_pallas_kernel_lowers(platform, case):
    B, (H, Hkv), D = 2, case["heads"], case["head_dim"]
    Tq, Tk = case["lengths"]
    dtype = jnp.dtype(case["dtype"])
    options = KERNEL_OPTIONS[platform]
    mask = _mask(case["mask"], B, Tq, Tk)
    q = jax.ShapeDtypeStruct((B, Tq, H, D), dtype)
    kv = jax.ShapeDtypeStruct((B, Tk, Hkv, D), dtype)
    stats = case["pass"] == "stats"

    def fwd(q, k, v):
        return attention.attention(q, k, v, mask, implementation="pallas", return_stats=stats,
                                   backend_options=options)

    if case["pass"] == "vjp":
        def program(q, k, v, d_out):
            _, pullback = jax.vjp(fwd, q, k, v)
            return pullback(d_out)
        exported = export(program, platform, q, kv, kv, q)
        assert [(a.shape, a.dtype) for a in exported.out_avals] == [(q.shape, dtype), (kv.shape, dtype),
                                                                    (kv.shape, dtype)]
    else:
        exported = export(fwd, platform, q, kv, kv)
        out_avals = exported.out_avals
        assert (out_avals[0].shape, out_avals[0].dtype) == ((B, Tq, H, D), dtype)
        if stats:  # per-row statistics [B, H, Tq]: float32 (and the bool `valid`) whatever the input dtype
            assert len(out_avals) >= 6
            assert all(a.shape[:3] == (B, H, Tq) for a in out_avals[1:])
            assert {a.dtype for a in out_avals[1:]} == {jnp.dtype(jnp.float32), jnp.dtype(jnp.bool_)}
    names = kernel_names(exported, KERNEL_TARGET[platform])
    assert names == KERNEL_NAMES[platform]["vjp" if case["pass"] == "vjp" else "fwd"]
    # Only the pallas kernels: no interpreted fallback, no other custom call.
    assert {t for t, _ in custom_calls(exported)} == {KERNEL_TARGET[platform]}
    if platform == "cuda":  # forward grid (B, H, Tq_padded / block_q)
        bq = options["block_q"]
        assert gpu_grids(exported)["attnlab_flash_fwd"] == (B, H, -(-Tq // bq))


def test_pairwise_grid_covers_every_pair():
    assert len(GRID) <= 16
    for a, b in itertools.combinations(["mask", "head_dim", "pass", "dtype", "heads", "lengths"], 2):
        seen = {(c[a], c[b]) for c in GRID}
        levels_a = {c[a] for c in GRID}
        levels_b = {c[b] for c in GRID}
        assert seen == set(itertools.product(levels_a, levels_b)), (a, b)


# ------------------------------------------------------------------------------------------------ defaults
def test_tpu_default_blocks_are_multiples_of_128():
    assert all(b % 128 == 0 for b in flash.DEFAULT_BLOCKS["tpu"])
    q = jnp.zeros((1, 256, 2, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"block_k=64 must be a multiple of 128 for the TPU kernel"):
        attention.attention(q, q, q, implementation="pallas", backend_options={"kernel": "tpu", "block_k": 64})


def test_gpu_kernel_head_dim_limits():
    """pallas on GPU: head dims up to 256 (padded to a power of two); cudnn: up to 256 and a multiple of 8."""
    with target_platform("cuda"):
        for D in (256, 257):
            x = jax.ShapeDtypeStruct((1, 128, 2, D), jnp.bfloat16)
            fn = lambda q, k, v: attention.attention(q, k, v, implementation="pallas")  # noqa: E731
            if D <= 256:
                assert kernel_names(export(fn, "cuda", x, x, x), TRITON) == {"attnlab_flash_fwd"}
            else:
                with pytest.raises(ValueError, match="head dims above 256 on GPU"):
                    export(fn, "cuda", x, x, x)
        for D, ok in ((256, True), (264, False), (100, False)):
            x = jax.ShapeDtypeStruct((1, 128, 2, D), jnp.bfloat16)
            fn = lambda q, k, v: attention.attention(q, k, v, implementation="cudnn")  # noqa: E731
            if ok:
                assert {t for t, _ in custom_calls(export(fn, "cuda", x, x, x))} == {"__cudnn$fmhaSoftmax"}
            else:
                with pytest.raises(ValueError, match="cudnn.*head dim"):
                    export(fn, "cuda", x, x, x)


# (platform, dtype, head dim) -> the backend "auto" must choose and the custom call that proves it
AUTO_CASES = [
    ("cuda", "bfloat16", 64, "pallas", TRITON),
    ("cuda", "float32", 128, "pallas", TRITON),
    ("cuda", "bfloat16", 512, "xla", None),  # above both GPU kernels' limit: plain XLA
    ("tpu", "bfloat16", 128, "pallas", MOSAIC),
    ("tpu", "float32", 64, "pallas", MOSAIC),
    ("tpu", "float16", 64, "xla", None),  # no float16 Mosaic kernel
]


@pytest.mark.parametrize("platform, dtype, head_dim, backend, target", AUTO_CASES)
def test_auto_on_an_accelerator_lowers_to_the_kernel_it_claims(platform, dtype, head_dim, backend, target):
    B, T, H = 2, 256, 4
    x = jax.ShapeDtypeStruct((B, T, H, head_dim), jnp.dtype(dtype))
    mask = Mask(causal=True)
    with target_platform(platform):
        request = attention.Request(batch=B, q_len=T, kv_len=T, num_heads=H, num_kv_heads=H, qk_dim=head_dim,
                                    v_dim=head_dim, dtype=x.dtype, mask=mask, dropout=False, return_stats=False,
                                    platform=attention.api.default_platform())
        assert attention.select_backend("auto", request).name == backend
        assert attention.auto_order(request)[0] == "pallas"
        exported = export(lambda q, k, v: attention.attention(q, k, v, mask), platform, x, x, x)
    targets = {t for t, _ in custom_calls(exported)}
    assert targets == ({target} if target else set())
    if backend == "pallas":  # the platform's default blocks, not the CPU ones
        names = kernel_names(exported, target)
        assert names == KERNEL_NAMES[platform]["fwd"]
        if platform == "cuda":
            bq = flash.DEFAULT_BLOCKS["gpu"][0]
            assert gpu_grids(exported)["attnlab_flash_fwd"] == (B, H, T // bq)


# ------------------------------------------------------------------------------------------------ train steps
def lower_train_step(task: str, attention_impl: str) -> jax.export.Exported:
    """The whole jitted train step of ``task`` ("translation": configs/translation.py:runlocal; "lm": a small
    synthetic decoder-only config) with ``attention_impl`` and bfloat16 compute, exported for CUDA.

    The only code here that knows the engine's layout (engine.state.build / abstract_state,
    engine.steps.make_train_step, engine.tasks.get_task, engine.sharding.make_mesh)."""
    from engine import sharding, state, steps, tasks
    from engine.config import sibling_config

    if task == "translation":
        spec = importlib.util.spec_from_file_location("translation_config",
                                                      os.path.join(REPO, "configs", "translation.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = module.get_config("runlocal")
        keys = ("inputs", "targets", "inputs_segmentation", "targets_segmentation", "inputs_position",
                "targets_position")
    else:
        presets = sibling_config(os.path.join(REPO, "configs", "_presets.py"), "_presets")
        config = presets.synthetic_config("copy", heads=4, qk_dim=0, layers=2, d_model=64, steps=10, runlocal=True)
        keys = ("inputs", "targets", "loss_mask", "segmentation", "position")
    config.model.update(attention_impl=attention_impl, dtype="bfloat16", max_len=64)
    config.mesh.update(data=1, model=1)
    B, T = 8, 64
    batch = {k: jax.ShapeDtypeStruct((B, T), jnp.int32) for k in keys}
    with target_platform("cuda"):
        mesh = sharding.make_mesh(config.mesh, devices=jax.devices()[:1])
        setup, init = state.build(config, tasks.get_task(config), mesh, vocab_size=512)
        return export(steps.make_train_step(setup), "cuda", state.abstract_state(setup, init), batch)


@pytest.mark.parametrize("task", ["translation", "lm"])
@pytest.mark.parametrize("attention_impl", ["pallas", "cudnn"])
def test_train_step_lowers_for_cuda_in_bfloat16(task, attention_impl):
    exported = lower_train_step(task, attention_impl)
    calls = custom_calls(exported)
    if attention_impl == "pallas":
        assert {t for t, _ in calls} == {TRITON}
        assert kernel_names(exported, TRITON) == KERNEL_NAMES["cuda"]["vjp"]
    else:
        targets = {t for t, _ in calls}
        assert targets and all(t.startswith(CUDNN_PREFIX) for t in targets)
        assert any(t.endswith("Backward") for t in targets) and any(not t.endswith("Backward") for t in targets)
    # bfloat16 compute inside; parameters, optimizer state and metrics stay float32 at the boundary.
    assert "xbf16>" in exported.mlir_module()
    assert not any(a.dtype == jnp.bfloat16 for a in (*exported.in_avals, *exported.out_avals))


# ------------------------------------------------------------------------------------------------ GPU check script
def _gpu_check_module():
    spec = importlib.util.spec_from_file_location("gpu_check_pallas",
                                                  os.path.join(REPO, "scripts", "gpu_check_pallas.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_script_cpu_parts(tmp_path):
    """scripts/gpu_check_pallas.py imports; its arguments, synthetic batches and reports work on CPU (the
    train step itself: ``--dry-run``)."""
    import numpy as np

    gc = _gpu_check_module()
    opts = gc.parse_args(["--dry-run", "--out", str(tmp_path)])
    assert (opts.phases, opts.train_impls, opts.train_steps) == (["train"], ["xla"], 2)
    assert gc.parse_args([]).phases == list(gc.PHASES) and gc.parse_args([]).train_impls == ["pallas", "cudnn", "xla"]
    with pytest.raises(SystemExit):
        gc.parse_args(["--train-steps", "0"])

    batch = gc.synthetic_batch(4, 64, 48, vocab_size=100, seed=1)
    assert {k: v.shape for k, v in batch.items()} == {
        **{k: (4, 64) for k in ("inputs", "inputs_segmentation", "inputs_position")},
        **{k: (4, 48) for k in ("targets", "targets_segmentation", "targets_position")}}
    assert all(v.dtype == np.int32 for v in batch.values())
    for side, length in (("inputs", 64), ("targets", 48)):
        seg, pos, tok = batch[f"{side}_segmentation"], batch[f"{side}_position"], batch[side]
        assert np.all((tok == 0) == (seg == 0)) and tok.max() < 100 and tok[seg > 0].min() >= 4
        assert 0.85 < np.mean(seg > 0) < 1.0 and seg.max() >= 2  # packed, with trailing padding
        for row in range(4):  # positions restart at 0 in every segment
            starts = np.flatnonzero(np.diff(np.concatenate([[0], seg[row]])) != 0)
            assert np.all(pos[row, starts[seg[row, starts] > 0]] == 0)

    rows = [dict(config="translation_wmt14", attention_impl=impl, dtype="bfloat16", batch="128x256+256",
                 tokens_per_step=61000, devices=1, device_kind="NVIDIA H200", compile_s=30.0, steps=20,
                 step_ms=ms, tokens_per_s=61000 / ms * 1e3, model_tflops=20.0, tflops_per_s=20.0 / ms * 1e3,
                 mfu=20.0 / ms * 1e3 / 989.0, loss=10.3, status="ok") for impl, ms in (("pallas", 80.0), ("xla", 95.0))]
    rows.append(dict(rows[0], attention_impl="cudnn", status="error: RuntimeError('x')"))
    for key in ("step_ms", "tokens_per_s", "tflops_per_s", "mfu", "loss", "compile_s", "steps", "model_tflops"):
        del rows[-1][key]
    text = gc.summarize([], [], {"tests": 0}, 16384, rows, 989.0)
    assert "| pallas | 80.0 | 762,500 | 250.0 | 25.3% | 30 | 10.300 | ok |" in text
    assert "| cudnn | - | - | - | - | - | - | error: RuntimeError('x') |" in text
    gc.write_csv(rows, str(tmp_path / "train_bench.csv"))
    assert (tmp_path / "train_bench.csv").read_text().splitlines()[0].startswith("config,attention_impl,")
