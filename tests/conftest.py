"""Test-wide setup: 8 simulated CPU devices and W&B off, set before jax is imported."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["WANDB_MODE"] = "disabled"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# NumPy's BLAS threads spin on the tiny reference products the tests make; one thread is faster here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
