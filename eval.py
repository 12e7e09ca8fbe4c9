"""Evaluate a checkpoint of a training run.

    python eval.py --workdir=runs/my-run [--step=3000] [--split=test] [--examples=0,5,9]
    python eval.py --workdir=runs/my-run --config=configs/translation.py --config.eval.beam_size=8

Evaluates with the config the run recorded (<workdir>/config.json) unless --config is given; a --config that
differs from it in a model or data field is refused, naming the fields; other differences (eval.*) are listed
and --config's values used. Restores the latest (or --step) checkpoint of --workdir, decodes --split with the
config's decoder (``config.eval.decode``: greedy or beam search; the output says which), writes hypotheses,
and reports sacreBLEU/chrF with their signatures, perplexity, and
per-layer, per-head attention entropy / max-logit / sink / logit mean and std tables; attention heatmaps and
interactive explorer pages for --examples. Results go to <workdir>/eval/<split>_step<N>/ (results.json,
attention.txt, hypotheses, heatmaps/). It logs one line naming the checkpoint, workdir and split first, and
progress while it evaluates and decodes. With --diagnose it runs the attention doctor instead and writes
<workdir>/eval/diagnose_step<N>/report.md and report.json.

    python eval.py --pretrained=<checkpoint dir or hub id> [--diagnose] [--examples=0,5] [--split=test]

runs the same analyses on a pretrained checkpoint (GPT-2, Llama/Qwen2, Marian, BERT; see docs/pretrained.md)
on our Bible corpus, plus BLEU/chrF for Marian; results go to --pretrained_out.
"""
from absl import flags
from ml_collections import config_flags

from engine import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "A config file (configs/*.py[:args]) to evaluate with "
                                          "instead of the run's recorded <workdir>/config.json.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory holding checkpoints/ and the tokenizer.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
_SPLIT = flags.DEFINE_string("split", None, "Split to evaluate (default: config.eval.split).")
_EXAMPLES = flags.DEFINE_list("examples", ["0", "1"], "Indices of split examples to draw attention heatmaps and "
                              "explorer pages for.")
_DIAGNOSE = flags.DEFINE_bool("diagnose", False, "Run the attention doctor (engine/doctor.py) instead: "
                              "<workdir>/eval/diagnose_step<N>/report.md and report.json.")
_DISTRIBUTED = flags.DEFINE_enum("distributed", "auto", ["auto", "yes", "no"],
                                 "Call jax.distributed.initialize() (auto: when launched on several hosts).")
_PRETRAINED = flags.DEFINE_string("pretrained", None, "A pretrained checkpoint directory or hub id (instead of "
                                  "--config/--workdir); see docs/pretrained.md.")
_PRETRAINED_OUT = flags.DEFINE_string("pretrained_out", "pretrained_eval", "Output directory for --pretrained.")
_BACKEND = flags.DEFINE_string("attention_impl", "auto", "Attention backend for --pretrained.")
_LIMIT = flags.DEFINE_integer("limit", 0, "--pretrained Marian: translate only the first N verses (0: all).")
flags.register_multi_flags_validator(
    ["workdir", "pretrained"], lambda f: f["pretrained"] is not None or f["workdir"] is not None,
    message="give --workdir (a training run; --config is optional) or --pretrained (a checkpoint)")


def pretrained_main(examples: tuple) -> None:
    from pretrained import analysis

    r = analysis.run(_PRETRAINED.value, _PRETRAINED_OUT.value, split=_SPLIT.value or "test", diagnose=_DIAGNOSE.value,
                     examples=examples, attention_impl=_BACKEND.value, limit=_LIMIT.value)
    print("\n".join(f"  {k:20s} {v}" for k, v in r.items()))


def main(argv):
    del argv
    import os

    from engine import checkpoint as ckpt_lib
    from engine import restore, runtime, watchdog
    from engine.errors import CheckpointError
    from engine.tasks import get_task

    # Every argument is checked before anything is built or written (the workdir is not created).
    if _PRETRAINED.value is not None:
        if _SPLIT.value not in (None, "train", "validation", "test"):
            raise cli.UsageError(f"--split={_SPLIT.value}: expected train, validation or test")
        try:
            return pretrained_main(tuple(int(x) for x in _EXAMPLES.value if x.strip()))
        except ValueError as e:
            raise cli.UsageError(str(e)) from None
    try:
        examples = tuple(int(x) for x in _EXAMPLES.value if x.strip())
    except ValueError:
        raise cli.UsageError(f"--examples={','.join(_EXAMPLES.value)}: expected comma-separated integers") from None
    ckpt_dir = os.path.join(_WORKDIR.value, "checkpoints")
    if not os.path.isdir(ckpt_dir):
        raise CheckpointError(f"no checkpoints/ in --workdir={_WORKDIR.value}; train first with train.py")
    intact, damaged, aside = ckpt_lib.inventory(ckpt_dir)
    if not (intact or damaged or aside):
        raise CheckpointError(f"no checkpoint in {ckpt_dir} (it is empty); train first with train.py")
    if not intact or (_STEP.value is not None and _STEP.value not in intact):
        what = f"no checkpoint at --step={_STEP.value}" if _STEP.value is not None else "no intact checkpoint"
        if _STEP.value in damaged:
            what = f"checkpoint step {_STEP.value} is damaged"
        raise CheckpointError(f"{what} in {ckpt_dir}; {ckpt_lib.describe_inventory(ckpt_dir)}")
    config, notes = restore.eval_config(_WORKDIR.value, _CONFIG.value)
    task = get_task(config)
    if _SPLIT.value is not None and _SPLIT.value not in task.splits:
        raise cli.UsageError(f"--split={_SPLIT.value}: expected one of {task.splits}"
                             f"{cli.did_you_mean(_SPLIT.value, task.splits)}")

    # a stop signal in any phase exits within it (a run recorded before the field: the default)
    watchdog.set_grace(config.train.get("stop_grace_seconds", watchdog.GRACE_SECONDS))
    runtime.maybe_initialize_distributed(_DISTRIBUTED.value)
    runtime.enable_compilation_cache()
    log = runtime.setup_logging(runtime.process_logfile(os.path.join(_WORKDIR.value, "eval.log")))
    if runtime.is_lead():  # every process evaluates the same checkpoint: the lead says which
        step = f"{_STEP.value}" if _STEP.value is not None else f"{intact[-1]} (the latest intact)"
        log.info("%s checkpoint step %s of %s on the %s split", "diagnosing" if _DIAGNOSE.value else "evaluating",
                 step, _WORKDIR.value, _SPLIT.value or task.default_split())
    for line in notes:
        log.info("%s", line)

    if _DIAGNOSE.value:
        d = restore.diagnose_checkpoint(config, _WORKDIR.value, step=_STEP.value, split=_SPLIT.value)
        if runtime.is_lead():  # every process holds the same findings: the lead prints them
            print(f"attention doctor, checkpoint step {d['step']}: {d['summary']}\nreport: "
                  f"{os.path.join(d['out_dir'], 'report.md')}")
        return
    r = restore.evaluate_checkpoint(config, _WORKDIR.value, step=_STEP.value, split=_SPLIT.value,
                                    heatmap_examples=examples)
    split = r["split"]
    lines = [f"checkpoint step {r['step']}, split {split}"]
    for key in (f"{split}/loss", f"{split}/perplexity", f"{split}/accuracy", f"{split}/sequence_accuracy",
                f"{split}/bleu", f"{split}/chrf"):
        if key in r:
            lines.append(f"  {key:24s} {r[key]:.4f}")
    for key in ("decoding", "bleu_signature", "chrf_signature", "hypotheses_path"):
        if r.get(key):
            lines.append(f"  {key:24s} {r[key]}")
    lines.append(r["tables"])
    lines.append(f"results in {r['out_dir']}")
    if runtime.is_lead():  # every process holds the same results: the lead prints them
        print("\n".join(lines))


if __name__ == "__main__":
    cli.run(main)
