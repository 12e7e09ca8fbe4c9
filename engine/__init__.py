"""Run machinery shared by train.py and eval.py: config, optimizer, sharding, checkpoints, logging, evaluation."""
