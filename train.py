"""Train and evaluate a model from a config file.

    python train.py --config=configs/translation.py [--workdir=runs/my-run] [--config.model.num_heads=4]
    python train.py --config=configs/translation.py:heads=4,qk_dim=128

This is ``engine.run`` with a workdir and the default hooks (engine/loop.py, engine/hooks.py). A rerun with the
same --workdir resumes from its latest checkpoint that restores (damaged steps are moved to
<workdir>/checkpoints_damaged/). Mistakes are one ERROR line and exit code 1 (engine/cli.py).

One run per workdir (a lock); a rerun with a config that changes training is refused unless
--allow_config_change (then the change is recorded in <workdir>/config_history.jsonl); a rerun of a finished
run says so and exits 0. After SIGTERM / SIGINT the run saves, stops and exits with 143 / 130; a hang (a step,
evaluation or save past train.watchdog_seconds) exits 1 with every thread's stack dumped
(docs/reliability.md).
"""
from absl import flags
from ml_collections import config_flags

from engine import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py[:args]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<config>-<name or timestamp>).")
_DISTRIBUTED = flags.DEFINE_enum("distributed", "auto", ["auto", "yes", "no"],
                                 "Call jax.distributed.initialize() (auto: when launched on several hosts).")
_ALLOW_CHANGE = flags.DEFINE_bool("allow_config_change", False,
                                  "Continue a run whose recorded config differs in fields that change training; "
                                  "the change is recorded with its step in <workdir>/config_history.jsonl.")
flags.mark_flags_as_required(["config"])


def main(argv):
    del argv
    import os

    from engine import config as config_lib
    from engine import runtime
    from engine import watchdog

    config = _CONFIG.value
    watchdog.set_grace(config.train.stop_grace_seconds)  # a stop signal in any phase exits within it
    runtime.maybe_initialize_distributed(_DISTRIBUTED.value)
    runtime.enable_compilation_cache()
    workdir = _WORKDIR.value or config_lib.default_workdir(config_flags.get_config_filename(flags.FLAGS["config"]),
                                                           config)
    log = runtime.setup_logging()  # train.log is opened once the workdir checks passed (engine/workdir.py)

    from engine import logs, loop
    from engine import workdir as workdir_lib

    try:
        final = loop.run(config, workdir, allow_config_change=_ALLOW_CHANGE.value,
                         logfile=runtime.process_logfile(os.path.join(workdir, "train.log")))
    except workdir_lib.RunFinished as e:
        log.info("%s", e)
        return 0
    log.info("done: %s", logs.summary_line(final))
    return (watchdog.signal_exit_code(final.get("stop_reason"))
            or watchdog.signal_exit_code(watchdog.StopRequest.received) or 0)


if __name__ == "__main__":
    cli.run(main)
