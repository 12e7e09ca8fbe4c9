"""Run a sweep defined beside its config, then aggregate it into one table and plots.

A sweep is a function ``sweep(arg=None)`` in a config file (next to its ``get_config(arg=None)``) that
yields the points: dicts from dotted config fields to values, e.g.
``{"model.num_heads": 4, "model.qk_dim": 128, "model.v_dim": 128, "seed": 1}``.

    # every point in turn on this machine; each trains with train.py in <workdir>/<point>
    python scripts/sweep.py --config=configs/table3_heads.py
    # the same config argument string train.py takes; extra overrides for every point
    python scripts/sweep.py --config=configs/table3_heads.py:wmt14 --set=train.num_steps=100000
    # only some points, or only rebuild the table and plots
    python scripts/sweep.py --config=configs/table3_dk.py --point=qk_dim_16-seed_0 --aggregate_only
    # a W&B sweep file for `wandb sweep` + `wandb agent` on many machines (each agent runs one point)
    python scripts/sweep.py --config=configs/table3_heads.py:wmt14 --wandb_sweep=table3_heads.yaml

Points run sequentially as ``python train.py --config=<config> --workdir=<workdir>/<point>
--config.<field>=<value> ...`` with ``config.wandb.group`` set to the sweep's name, so every point lands in
one W&B group. A finished point leaves ``<point>/sweep_point.json`` with ``"status": "done"`` and is skipped
when the sweep is run again; an interrupted point resumes from its own checkpoints (train.py resumes from
its workdir). Aggregation writes ``<workdir>/README.md`` (Markdown table and figures), ``results.csv``,
``metrics.png`` (the task's metrics, one line per varied setting, seeds aggregated) and ``entropy_heatmaps.png``.
While a point trains, a line per minute gives its settings, step, loss and time left.

Run folders are not committed. ``--records=DIR`` keeps a small record of every finished point in
``DIR/<point>.json`` (``point_record``: config and overrides, commit, seed, final validation and test metrics,
learning curve, stability statistics, per-sentence BLEU statistics of the decoded test set), the decoded
sentences beside it (``DIR/<point>.<split>.txt``) and the attention trace the health monitor read
(``DIR/<point>.attention.json.gz``, for ``scripts/health_calibration.py``); committed, it makes the point finished
for good: a point whose record exists is skipped even when its run folder is gone, and a record made with other
settings is refused, naming the point. ``--in_process`` trains each point through ``engine.run`` in this process.

    python scripts/sweep.py --config=configs/table3_dk.py --records=docs/results/table3/points/B
"""
from __future__ import annotations

import sys

# Transitional: scripts not yet on the studies package import this CLI as `sweep`; they get the library's names.
from studies.points import *  # noqa: F401,F403
from studies.points import _write_text_atomic  # noqa: F401
from studies.sweeps import aggregate, main  # noqa: F401


if __name__ == "__main__":
    from engine import cli

    sys.exit(cli.script(main))
