"""Typed access to a point's committed record (``<point>.json``, written by ``studies.points.point_record``) and
the files beside it: the decoded test sentences and the attention trace.

    rec = Record.load("docs/results/table3_d256/points/A/num_heads_1-seed_0.json")
    rec.valid_nll, rec.test_bleu, rec.epochs, rec.stability.max_grad_norm, rec.valid_nll_at(1200)
    rec.trace()          # the attention summaries the health monitor read (None when not committed)
    records_in("docs/results/table3_d256/points/A")   # every record of a folder, by point name

Every field a record may lack (older records, tasks without BLEU) reads as None; nothing here trains or writes.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from studies import points as points_lib


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``raw[key]`` when it is a mapping (a record section), else an empty mapping."""
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def _finite(x: Any) -> Optional[float]:
    """A finite float from a JSON value, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(float(x)) else None


@dataclasses.dataclass(frozen=True)
class Stability:
    """A run's stability statistics: loss spikes (``spike_rule``), gradient norms, the largest attention logit per
    attention group, the first non-finite step and the health monitor's warnings."""

    loss_spikes: Optional[int]
    max_loss_jump: Optional[float]
    max_grad_norm: Optional[float]
    max_attention_logit: Mapping[str, Optional[float]]
    non_finite_step: Optional[int]
    health_warnings: Optional[int]
    health_warning_kinds: Mapping[str, int]

    @property
    def max_logit(self) -> Optional[float]:
        """The largest attention logit over the groups (None when none was logged)."""
        return max((v for v in self.max_attention_logit.values() if v is not None), default=None)


@dataclasses.dataclass(frozen=True)
class Curve:
    """A run's learning curve: binned training loss (``step``, ``train_loss``) and every validation evaluation
    (``valid_step``, ``valid_nll``)."""

    step: Sequence[int]
    train_loss: Sequence[Optional[float]]
    valid_step: Sequence[int]
    valid_nll: Sequence[Optional[float]]


@dataclasses.dataclass(frozen=True)
class Record:
    """One finished point's record. ``raw`` keeps the JSON for fields a study reads that are not typed here."""

    path: str
    raw: Mapping[str, Any]

    @classmethod
    def load(cls, path: str) -> "Record":
        """The record at ``path`` (ValueError naming it when it is not valid JSON)."""
        return cls(path, points_lib.read_record(path))

    # what the point was
    @property
    def name(self) -> str:
        return str(self.raw.get("point") or os.path.splitext(os.path.basename(self.path))[0])

    @property
    def config(self) -> str:
        return str(self.raw.get("config") or "")

    @property
    def overrides(self) -> Mapping[str, Any]:
        return _section(self.raw, "overrides")

    def override(self, field: str) -> Any:
        """The value the point set for dotted ``field`` (None when it set none)."""
        return self.overrides.get(field)

    @property
    def seed(self) -> Optional[int]:
        seed = self.raw.get("seed")
        return int(seed) if isinstance(seed, int) else None

    @property
    def model(self) -> Mapping[str, Any]:
        """The model fields the record keeps (d_model, num_heads, qk_dim, v_dim, d_ff, layers, qk_layernorm)."""
        return _section(self.raw, "model")

    @property
    def train(self) -> Mapping[str, Any]:
        """The training fields the record keeps (num_steps, learning_rate, schedule, warmup_steps, ...)."""
        return _section(self.raw, "train")

    @property
    def settings_sha(self) -> Optional[str]:
        return self.raw.get("settings_sha")

    # when, where, by which code
    @property
    def commit(self) -> str:
        return str(self.raw.get("commit") or "not recorded")

    @property
    def first_logged_utc(self) -> Optional[str]:
        """When training started ("YYYY-MM-DD HH:MM:SS", UTC); None in records without it."""
        return self.raw.get("first_logged_utc")

    @property
    def device(self) -> Optional[str]:
        return self.raw.get("device")

    @property
    def machine(self) -> Optional[str]:
        """The machine the record was written on, "<name> (<CPU model>; <device>)"; None in records made before
        records named it."""
        return self._machine(device=True)

    @property
    def machine_cpu(self) -> Optional[str]:
        """"<name> (<CPU>)", the machine without its device; None in records made before records named it."""
        return self._machine(device=False)

    def _machine(self, device: bool) -> Optional[str]:
        m = self.raw.get("machine")
        if not m or not isinstance(m, Mapping):
            return str(m) if m else None
        if not device:
            return f"{m['name']} ({m.get('cpu') or 'CPU not recorded'})" if m.get("name") else None
        rest = "; ".join(str(m[k]) for k in ("cpu", "device") if m.get(k))
        return f"{m.get('name') or 'unnamed'}" + (f" ({rest})" if rest else "")

    @property
    def boots(self) -> tuple[Optional[str], ...]:
        """The boot id of each training call, in order (None for a call that logged none); () in records made
        before records kept them."""
        m = self.raw.get("machine")
        return tuple(b or None for b in m.get("boots") or ()) if isinstance(m, Mapping) else ()

    @property
    def execution(self) -> Mapping[str, Any]:
        return _section(self.raw, "execution")

    # size and budget
    @property
    def steps(self) -> int:
        return int(self.raw.get("steps") or 0)

    @property
    def params(self) -> Optional[int]:
        params = self.raw.get("params")
        return int(params) if isinstance(params, int) else None

    @property
    def batches_per_epoch(self) -> Optional[int]:
        value = self.raw.get("batches_per_epoch")
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def epochs(self) -> Optional[float]:
        """Steps over batches per epoch (None for streams without epochs)."""
        return None if self.batches_per_epoch is None else self.steps / self.batches_per_epoch

    @property
    def wall_minutes(self) -> Optional[float]:
        """The larger of the runner's time for the last training call and the logged time of all calls."""
        values = [v for v in (_finite(self.raw.get("wall_s")), _finite(self.raw.get("logged_s"))) if v is not None]
        return max(values) / 60 if values else None

    @property
    def config_changes(self) -> Optional[list[tuple[int, Mapping[str, Sequence[Any]]]]]:
        """(step, {field: [before, after]}) of each change of the run's config on a resume (the record's ``model``
        and ``train`` are the config it started with); [] when none; None in records made before records kept
        them."""
        changes = self.raw.get("config_changes")
        if not isinstance(changes, list):
            return None
        return [(int(c.get("step") or 0), _section(c, "changes")) for c in changes if isinstance(c, Mapping)]

    @property
    def cpu_hours(self) -> Optional[float]:
        """CPU hours of the point's training processes (every thread; pauses left out); None in records before
        the engine logged ``cpu_s``."""
        cpu_s = _finite(self.raw.get("cpu_s"))
        return None if cpu_s is None else cpu_s / 3600

    @property
    def train_minutes(self) -> Optional[float]:
        """Steps times the median seconds per step (pauses and evaluation left out); None when not recorded."""
        step_s = _finite(self.raw.get("median_step_s"))
        return None if step_s is None or not self.steps else step_s * self.steps / 60

    # results
    @property
    def validation(self) -> Mapping[str, Any]:
        return _section(self.raw, "validation")

    @property
    def test(self) -> Mapping[str, Any]:
        return _section(self.raw, "test")

    @property
    def valid_nll(self) -> Optional[float]:
        return _finite(self.validation.get("nll"))

    @property
    def valid_ppl(self) -> Optional[float]:
        return _finite(self.validation.get("perplexity"))

    @property
    def valid_accuracy(self) -> Optional[float]:
        return _finite(self.validation.get("accuracy"))

    @property
    def test_bleu(self) -> Optional[float]:
        return _finite(self.test.get("bleu"))

    @property
    def test_chrf(self) -> Optional[float]:
        return _finite(self.test.get("chrf"))

    @property
    def bleu_rows(self) -> Optional[np.ndarray]:
        """[sentences, 10] per-sentence BLEU statistics of the decoded test split (None when nothing was decoded)."""
        rows = _section(self.raw, "bleu_sentence_stats").get("rows")
        return np.asarray(rows, dtype=np.int64) if rows else None

    @property
    def curve(self) -> Curve:
        c = _section(self.raw, "curve")
        return Curve(step=list(c.get("step") or []), train_loss=list(c.get("train_loss") or []),
                     valid_step=list(c.get("valid_step") or []), valid_nll=list(c.get("valid_nll") or []))

    def valid_nll_at(self, step: int) -> Optional[float]:
        """The validation NLL logged at ``step`` (None when not evaluated there)."""
        c = self.curve
        return next((_finite(v) for s, v in zip(c.valid_step, c.valid_nll) if s == step), None)

    @property
    def stability(self) -> Stability:
        s = _section(self.raw, "stability")
        return Stability(loss_spikes=s.get("loss_spikes"), max_loss_jump=_finite(s.get("max_loss_jump")),
                         max_grad_norm=_finite(s.get("max_grad_norm")),
                         max_attention_logit={g: _finite(v) for g, v in _section(s, "max_attention_logit").items()},
                         non_finite_step=s.get("non_finite_step"), health_warnings=s.get("health_warnings"),
                         health_warning_kinds=_section(s, "health_warning_kinds"))

    def metric(self, name: str) -> Optional[float]:
        """A number by name, for claims and tables: ``nll``, ``ppl``, ``accuracy``, ``bleu``, ``chrf``, ``grad``,
        ``spikes``, ``jump``, ``logit``, ``warnings``, ``wall``, ``train``, ``cpu`` (CPU minutes), ``params``,
        ``steps``, ``epochs``, or a study's own scalar kept in the record's ``metrics`` section."""
        st = self.stability
        table = {"nll": self.valid_nll, "ppl": self.valid_ppl, "accuracy": self.valid_accuracy,
                 "bleu": self.test_bleu, "chrf": self.test_chrf, "grad": st.max_grad_norm,
                 "spikes": _finite(st.loss_spikes), "jump": st.max_loss_jump, "logit": st.max_logit,
                 "warnings": _finite(st.health_warnings), "wall": self.wall_minutes, "train": self.train_minutes,
                 "cpu": None if self.cpu_hours is None else self.cpu_hours * 60, "params": _finite(self.params),
                 "steps": float(self.steps), "epochs": self.epochs}
        if name in table:
            return table[name]
        own = _section(self.raw, "metrics")
        if name in own:
            return _finite(own[name])
        raise ValueError(f"record metric {name!r} of {self.name}; expected one of {sorted(table)} or of its "
                         f"metrics {sorted(own)}")

    # files beside the record
    def trace(self) -> Optional[dict[str, Any]]:
        """The attention trace committed beside the record (``<point>.attention.json.gz``), None when absent."""
        path = points_lib.attention_trace_path(self.path)
        return points_lib.read_attention_trace(path) if os.path.exists(path) else None

    def hypotheses(self) -> Optional[list[str]]:
        """The decoded test sentences committed beside the record, one per sentence (None when absent)."""
        split = self.test.get("split")
        path = points_lib.hypotheses_path(self.path, split) if split else None
        if path is None or not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip("\n").split("\n")


_CACHE: dict[str, tuple[tuple, dict[str, Record]]] = {}


def records_in(folder: str) -> dict[str, Record]:
    """point name -> Record for every ``<folder>/<point>.json`` (empty when the folder is missing); read again
    only when a file of the folder was added, removed or changed."""
    if not os.path.isdir(folder):
        return {}
    files = sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(folder)
                   if e.name.endswith(".json"))
    key = os.path.abspath(folder)
    if key not in _CACHE or _CACHE[key][0] != tuple(files):
        _CACHE[key] = (tuple(files), {f[: -len(".json")]: Record.load(os.path.join(folder, f)) for f, _, _ in files})
    return dict(_CACHE[key][1])


def values(records: Sequence[Record], name: str) -> list[float]:
    """``metric(name)`` of each record that has it."""
    return [v for v in (r.metric(name) for r in records) if v is not None]
