"""Train and evaluate a model from a config file.

    python train.py --config=configs/translation.py [--workdir=runs/my-run] [--config.model.num_heads=4]
    python train.py --config=configs/translation.py:heads=4,qk_dim=128

This is ``engine.run`` with a workdir and the default hooks (engine/loop.py, engine/hooks.py). A rerun with the
same --workdir resumes from its latest checkpoint that restores (damaged steps are moved to
<workdir>/checkpoints_damaged/). Mistakes are one ERROR line and exit code 1 (engine/cli.py).
"""
from absl import flags
from ml_collections import config_flags

from engine import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py[:args]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<config>-<name or timestamp>).")
_DISTRIBUTED = flags.DEFINE_enum("distributed", "auto", ["auto", "yes", "no"],
                                 "Call jax.distributed.initialize() (auto: when launched on several hosts).")
flags.mark_flags_as_required(["config"])


def main(argv):
    del argv
    import os

    from engine import config as config_lib
    from engine import runtime

    runtime.maybe_initialize_distributed(_DISTRIBUTED.value)
    runtime.enable_compilation_cache()
    config = _CONFIG.value
    workdir = _WORKDIR.value or config_lib.default_workdir(config_flags.get_config_filename(flags.FLAGS["config"]),
                                                           config)
    log = runtime.setup_logging(runtime.process_logfile(os.path.join(workdir, "train.log")))
    log.info("workdir: %s", os.path.abspath(workdir))

    from engine import logs, loop

    final = loop.run(config, workdir)
    log.info("done: %s", logs.summary_line(final))


if __name__ == "__main__":
    cli.run(main)
