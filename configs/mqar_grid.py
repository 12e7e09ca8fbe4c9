"""Multi-query associative recall over num_heads x qk_dim through train.py: a sweep beside ``lm_mqar.py``.

    python scripts/sweep.py --config=configs/mqar_grid.py                 # 3 x 4 grid, 1 seed
    python scripts/sweep.py --config=configs/mqar_grid.py:seeds=3,steps=5000
    python train.py --config=configs/mqar_grid.py:heads=4,qk_dim=8        # one point

Arguments: heads, qk_dim and seed (the point train.py trains), seeds (the sweep runs seeds 0..seeds-1),
steps, pairs, runlocal (tiny model, a few steps). v_dim = d_model / heads at every point, so the attention
output width stays d_model; accuracy on the query positions is ``validation/accuracy`` in the sweep table.
(``scripts/repro_mqar.py`` trains the same grid in-process, faster on a CPU.)
"""
import importlib.util
import os

from engine.config import parse_arg

HEADS = (1, 2, 4)
QK_DIMS = (4, 8, 16, 32)


def _parse(arg):
    return parse_arg(arg, heads=2, qk_dim=16, seed=0, seeds=1, steps=3000, pairs=8, runlocal=False)


def get_config(arg=None):
    a = _parse(arg)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm_mqar.py")
    spec = importlib.util.spec_from_file_location("attnlab_config_lm_mqar", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config(f"pairs={a.pairs},steps={a.steps}" + (",runlocal" if a.runlocal else ""))
    if a.heads <= 0 or c.model.d_model % a.heads:
        raise ValueError(f"mqar_grid: heads={a.heads} must be a positive divisor of d_model={c.model.d_model}")
    c.model.num_heads = a.heads
    c.model.qk_dim = a.qk_dim
    c.model.v_dim = c.model.d_model // a.heads
    c.seed = a.seed
    c.wandb.tags = tuple(c.wandb.tags) + ("mqar_grid",)
    return c


def sweep(arg=None):
    """Points: seed x num_heads in HEADS x qk_dim in QK_DIMS, v_dim = d_model / num_heads."""
    a = _parse(arg)
    d_model = get_config(arg).model.d_model
    for seed in range(a.seeds):
        for h in HEADS:
            for dk in QK_DIMS:
                yield {"model.num_heads": h, "model.qk_dim": dk, "model.v_dim": d_model // h, "seed": seed}
