"""Translation data: a parallel corpus, a SentencePiece tokenizer and fixed-shape batches.

One code path serves every source (`cfg.source`):

- ``"bible_es_en"`` (default): the Spanish-English Bible corpus committed in this package, read through its
  TFDS builder (`data.builders.BibleEsEn`, array_record, `as_data_source`); needs no network.
- ``"tfds"``: any TFDS translation dataset with one text feature per language, e.g. ``wmt14_translate/de-en``.
  It is read through ``as_data_source`` too, so it must be prepared in ``array_record`` format; with
  ``tfds_download=True`` this package prepares it (network needed), otherwise a missing dataset is an error
  that says how to prepare it.
- ``"text_files"``: your own parallel text files (see `data.text_files`).

`build_translation` reads the training split, trains (or reuses) SentencePiece on it, encodes it, and returns
a `TranslationData` whose `train_iter()` yields packed or length-bucketed batches forever. Tokenizers and
encoded corpora are cached under ``cfg.cache_dir`` (default ``$ATTNLAB_CACHE_DIR`` or ``~/.cache/attnlab``),
keyed by the corpus and the settings, and the tokenizer is copied into ``workdir/tokenizer/``.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from typing import Iterator

import ml_collections
import numpy as np

from data import batching, loader, splits, text_files
from data.errors import DataError, did_you_mean
from data.tokenizer import MODEL_TYPES, Tokenizer, cached_tokenizer, tokenizer_key

log = logging.getLogger("attnlab")

SOURCES = ("bible_es_en", "tfds", "text_files")
OVERLONG_POLICIES = ("truncate", "drop")
_READ_CHUNK = 4096


def default_translation_config() -> ml_collections.ConfigDict:
    """The default data config (Spanish -> English Bible, shared 8k BPE, packed 128-token rows)."""
    c = ml_collections.ConfigDict()
    c.source = "bible_es_en"  # bible_es_en | tfds | text_files
    c.source_lang = "es"  # feature / file suffix of the source language
    c.target_lang = "en"
    # TFDS (source="tfds"; the split names also apply to bible_es_en)
    c.tfds_name = ""  # e.g. "wmt14_translate/de-en"
    c.tfds_data_dir = ""  # "" = TFDS default for "tfds", <cache_dir>/tfds for bible_es_en
    c.tfds_download = True  # prepare a missing TFDS dataset (network); False = error if not prepared
    c.train_split = "train"
    c.validation_split = "validation"
    c.test_split = "test"
    # Bring your own corpus (source="text_files"): a .tsv/.tsv.gz file or a PREFIX with PREFIX.<lang> files
    c.train_files = ""
    c.validation_files = ""  # "" = carve validation_fraction out of train_files
    c.test_files = ""  # "" = carve test_fraction out of train_files
    c.validation_fraction = 0.02  # by hash of the source sentence, so duplicates stay in one split
    c.test_fraction = 0.02
    c.on_bad_line = "skip"  # skip (and count) or error on empty / non-UTF-8 / malformed lines
    # Tokenizer (trained on the training split only)
    c.vocab_size = 8000
    c.spm_model_type = "bpe"  # bpe | unigram (unigram trains ~10x slower)
    c.spm_shared = True  # one vocabulary for both languages (else one per side, each vocab_size)
    c.spm_max_sentences = 1_000_000  # sentences sampled to train SentencePiece
    c.spm_character_coverage = 1.0
    c.cache_dir = ""  # "" = $ATTNLAB_CACHE_DIR or ~/.cache/attnlab
    # Lengths, in tokens including EOS
    c.max_source_len = 128
    c.max_target_len = 128
    c.overlong = "truncate"  # truncate | drop (training split; evaluation splits are always truncated)
    # Batching
    c.packing = True  # pack several examples per row (segment ids and positions mark them)
    c.batch_size = 64  # packing: global rows per batch, each [max_source_len] / [max_target_len]
    c.batch_tokens = 8192  # bucketing (packing=False): global token budget per side per batch
    c.bucket_boundaries = (16, 24, 32, 48, 64, 96)  # bucketing: row lengths; max length is added
    c.batch_multiple = 0  # global batch rows divide by this; 0 = jax.device_count()
    c.eval_batch_size = 64  # global rows per evaluation batch
    c.prefetch = 2  # training batches prepared ahead in a background thread
    return c


def default_cache_dir() -> str:
    return os.environ.get("ATTNLAB_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "attnlab")


def validate_translation_config(cfg: ml_collections.ConfigDict) -> None:
    """Raises DataError naming the first impossible setting or unknown field (no file is opened)."""
    unknown = sorted(set(cfg.keys()) - set(default_translation_config().keys()))
    if unknown:
        raise DataError(f"unknown data config field(s) {unknown}; the fields are those of "
                        f"data.default_translation_config(): {sorted(default_translation_config().keys())}")
    for name, value, allowed in (("source", cfg.source, SOURCES), ("overlong", cfg.overlong, OVERLONG_POLICIES),
                                 ("on_bad_line", cfg.on_bad_line, text_files.BAD_LINE_POLICIES),
                                 ("spm_model_type", cfg.spm_model_type, MODEL_TYPES)):
        if value not in allowed:
            raise DataError(f"data.{name}={value!r}; expected one of {allowed}{did_you_mean(value, allowed)}")
    if cfg.source_lang == cfg.target_lang:
        raise DataError(f"data.source_lang and data.target_lang must differ; both are {cfg.source_lang!r}")
    if cfg.source == "bible_es_en" and {cfg.source_lang, cfg.target_lang} != {"es", "en"}:
        raise DataError(f"bible_es_en has languages 'es' and 'en'; got data.source_lang={cfg.source_lang!r}, "
                        f"data.target_lang={cfg.target_lang!r}")
    if cfg.source == "tfds" and not cfg.tfds_name:
        raise DataError("data.source='tfds' needs data.tfds_name, e.g. 'wmt14_translate/de-en'")
    if cfg.source == "text_files" and not cfg.train_files:
        raise DataError("data.source='text_files' needs data.train_files (a .tsv file or a PREFIX with "
                        "PREFIX.<lang> files)")
    for name in ("max_source_len", "max_target_len"):
        if cfg[name] < 2:
            raise DataError(f"data.{name}={cfg[name]}; expected >= 2 (one token plus EOS)")
    for name in ("batch_size", "batch_tokens", "eval_batch_size", "vocab_size", "spm_max_sentences"):
        if cfg[name] < 1:
            raise DataError(f"data.{name}={cfg[name]}; expected >= 1")
    if cfg.prefetch < 0:
        raise DataError(f"data.prefetch={cfg.prefetch}; expected >= 0")


def check_translation_sources(cfg: ml_collections.ConfigDict) -> None:
    """Raises DataError unless every source the config names can be opened: the train, validation and test
    files (text_files), or the TFDS dataset and its three splits (tfds: prepared, or tfds_download set)."""
    if cfg.source == "text_files":
        for split in splits.SPLITS:
            spec = cfg[f"{split}_files"]
            if spec:
                text_files.resolve_files(spec, cfg.source_lang, cfg.target_lang, field=f"data.{split}_files")
        return
    if cfg.source == "tfds":
        import tensorflow_datasets as tfds

        builder = _tfds_builder(cfg, tfds, prepare=False)
        if builder.is_prepared():
            _check_tfds_splits(builder, cfg)


def _check_tfds_splits(builder, cfg) -> None:
    """Every split a ``*_split`` field names exists (TFDS split expressions: "train[:5%]+validation")."""
    available = sorted(builder.info.splits)
    for split in splits.SPLITS:
        expression = cfg[f"{split}_split"]
        for name in (part.split("[", 1)[0].strip() for part in expression.split("+")):
            if name not in available:
                raise DataError(f"data.{split}_split={expression!r}: {builder.info.full_name} has no split {name!r};"
                                f" available: {available}{did_you_mean(name, available)}")


# ------------------------------------------------------------------------------------------------ corpora
class _TfdsCorpus:
    """A TFDS dataset read through `as_data_source` (array_record)."""

    def __init__(self, builder, cfg):
        self._builder = builder
        self._cfg = cfg
        self._split_names = {"train": cfg.train_split, "validation": cfg.validation_split,
                             "test": cfg.test_split}

    def identity(self, split: str) -> str:
        content = getattr(self._builder, "CORPUS", None)  # builders generating from a local file
        digest = f":{_file_sha(content)[:16]}" if content else ""
        return f"tfds:{self._builder.info.full_name}{digest}:{self._split_names[split]}"

    def read(self, split: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
        name = self._split_names[split]
        try:
            source = self._builder.as_data_source(split=name)
        except Exception as e:  # TFDS raises several types for unknown splits
            raise DataError(f"{self._builder.info.full_name} has no split {name!r} (config field {split}_split); "
                            f"available: {sorted(self._builder.info.splits)}") from e
        src_lang, tgt_lang = self._cfg.source_lang, self._cfg.target_lang
        pairs, counts = [], collections.Counter(pairs_read=0, skipped_empty=0)
        for start in range(0, len(source), _READ_CHUNK):
            for ex in source.__getitems__(list(range(start, min(len(source), start + _READ_CHUNK)))):
                if src_lang not in ex or tgt_lang not in ex:
                    raise DataError(f"{self._builder.info.full_name} examples have features {sorted(ex)}; "
                                    f"source_lang={src_lang!r} / target_lang={tgt_lang!r} must be among them")
                counts["pairs_read"] += 1
                src, tgt = _text(ex[src_lang]).strip(), _text(ex[tgt_lang]).strip()
                if not src or not tgt:
                    if self._cfg.on_bad_line == "error":
                        raise DataError(f"{self._builder.info.full_name}[{name}] example {counts['pairs_read'] - 1}"
                                        f" has an empty side (set on_bad_line='skip' to skip and count these)")
                    counts["skipped_empty"] += 1
                    continue
                pairs.append((src, tgt))
        return pairs, dict(counts)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class _TextFilesCorpus:
    """Parallel text files, with validation/test carved out of train_files by hash when not given."""

    def __init__(self, cfg):
        self._cfg = cfg
        self._full: tuple | None = None

    def _spec(self, split: str) -> str:
        return self._cfg[f"{split}_files"]

    def identity(self, split: str) -> str:
        c = self._cfg
        spec = self._spec(split) or c.train_files
        files = text_files.file_identity(spec, c.source_lang, c.target_lang, field=f"data.{split}_files")
        carve = {s: not self._spec(s) for s in ("validation", "test")}
        return json.dumps({"files": files, "split": split, "carve": carve, "fractions":
                           [c.validation_fraction, c.test_fraction], "on_bad_line": c.on_bad_line})

    def read(self, split: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
        c = self._cfg
        if self._spec(split) and split != "train":
            pairs, counts = text_files.read_parallel(self._spec(split), source_lang=c.source_lang,
                                                     target_lang=c.target_lang, on_bad_line=c.on_bad_line,
                                                     field=f"data.{split}_files")
            return pairs, _read_counts(counts)
        if self._full is None:
            self._full = text_files.read_parallel(c.train_files, source_lang=c.source_lang,
                                                  target_lang=c.target_lang, on_bad_line=c.on_bad_line,
                                                  field="data.train_files")
        pairs, counts = self._full
        carve = {s: not self._spec(s) for s in ("validation", "test")}
        if not any(carve.values()):
            return pairs, _read_counts(counts)
        fractions = {"validation_fraction": c.validation_fraction if carve["validation"] else 0.0,
                     "test_fraction": c.test_fraction if carve["test"] else 0.0}
        kept = [p for p in pairs if splits.assign_split(p[0], salt="text_files", **fractions) == split]
        return kept, {**_read_counts(counts), "pairs_read": len(kept)}


def _read_counts(counts: dict[str, int]) -> dict[str, int]:
    out = {k: v for k, v in counts.items() if k != "lines"}
    out["pairs_read"] = counts["lines"]
    return out


def _open_corpus(cfg, cache_dir: str):
    if cfg.source == "text_files":
        return _TextFilesCorpus(cfg)
    import tensorflow_datasets as tfds

    if cfg.source == "bible_es_en":
        from data.builders import BibleEsEn

        with _quiet_tfds(tfds, banner=False):
            builder = BibleEsEn(data_dir=cfg.tfds_data_dir or os.path.join(cache_dir, "tfds"),
                                file_format="array_record")
            if not builder.is_prepared():
                start = time.time()
                log.info("data: writing the embedded %s corpus as a TFDS dataset (first run only) to %s",
                         builder.name, builder.data_dir)
                builder.download_and_prepare()
                log.info("data: %s prepared in %.1f s", builder.name, time.time() - start)
        return _TfdsCorpus(builder, cfg)
    with _quiet_tfds(tfds, banner=True):
        return _TfdsCorpus(_tfds_builder(cfg, tfds), cfg)


@contextlib.contextmanager
def _quiet_tfds(tfds, *, banner: bool) -> Iterator[None]:
    """TFDS without its noise: no progress bars outside a terminal (their redraws and cursor moves would fill a
    log file), and, with ``banner=False`` (a corpus generated from a committed file: nothing is downloaded), no
    "Downloading and preparing dataset Unknown size" banner on stdout nor its absl INFO/WARNING lines."""
    absl_logger = logging.getLogger("absl")
    level, bars = absl_logger.level, not sys.stderr.isatty()
    if bars:
        tfds.disable_progress_bar()
    if not banner:
        absl_logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()) if not banner else contextlib.nullcontext():
            yield
    finally:
        absl_logger.setLevel(level)
        if bars:
            tfds.enable_progress_bar()


def _tfds_builder(cfg, tfds, *, prepare: bool = True):
    """The prepared TFDS builder for cfg.tfds_name, preparing it if allowed (and ``prepare``); clear errors
    otherwise."""
    kwargs = {"data_dir": cfg.tfds_data_dir or None, "file_format": "array_record"}
    try:
        builder = tfds.builder(cfg.tfds_name, **kwargs)
    except tfds.core.registered.DatasetNotFoundError:
        import tensorflow_datasets.translate  # noqa: F401  registers the WMT and other translation builders

        try:
            builder = tfds.builder(cfg.tfds_name, **kwargs)
        except tfds.core.registered.DatasetNotFoundError as e:
            raise DataError(f"TFDS has no dataset {cfg.tfds_name!r} (data.tfds_name)") from e
    if builder.is_prepared() or (cfg.tfds_download and not prepare):
        return builder
    where = builder.data_dir
    if not cfg.tfds_download:
        raise DataError(f"TFDS dataset {cfg.tfds_name!r} is not prepared in {where}. Prepare it once, with "
                        f"network access, in array_record format: set data.tfds_download=True, or run "
                        f"tfds.builder({cfg.tfds_name!r}, data_dir=..., file_format='array_record')"
                        f".download_and_prepare()")
    try:
        builder.download_and_prepare()
    except Exception as e:
        raise DataError(f"preparing TFDS dataset {cfg.tfds_name!r} in {where} failed; it needs network access "
                        f"to its sources ({type(e).__name__}: {e})") from e
    return builder


# ---------------------------------------------------------------------------------------------- encoding
def _encode(pairs: list[tuple[str, str]], src_tok: Tokenizer, tgt_tok: Tokenizer) -> batching.EncodedPairs:
    src = src_tok.encode_batch([p[0] for p in pairs])
    tgt = tgt_tok.encode_batch([p[1] for p in pairs])
    return batching.EncodedPairs.from_lists(src, tgt)


def _save_npz(path: str, pairs: batching.EncodedPairs, counts: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, src=pairs.src, src_offsets=pairs.src_offsets, tgt=pairs.tgt, tgt_offsets=pairs.tgt_offsets,
             counts=np.array(json.dumps(counts)))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)


def _load_npz(path: str) -> tuple[batching.EncodedPairs, dict]:
    with np.load(path) as z:
        return (batching.EncodedPairs(z["src"], z["src_offsets"], z["tgt"], z["tgt_offsets"]),
                json.loads(str(z["counts"])))


def _file_sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _length_policy(pairs: batching.EncodedPairs, cfg, *, drop: bool) -> tuple[np.ndarray, dict[str, int]]:
    """Ids of the pairs kept and the counts of truncated / dropped ones."""
    raw_src, raw_tgt = pairs.raw_lengths()
    long_src = raw_src + 1 > cfg.max_source_len
    long_tgt = raw_tgt + 1 > cfg.max_target_len
    empty = (raw_src == 0) | (raw_tgt == 0)  # e.g. a sentence of characters SentencePiece drops
    if drop:
        keep = ~(long_src | long_tgt | empty)
        counts = {"dropped_overlong": int((long_src | long_tgt).sum()), "truncated_source": 0,
                  "truncated_target": 0}
    else:
        keep = ~empty
        counts = {"dropped_overlong": 0, "truncated_source": int(long_src.sum()),
                  "truncated_target": int(long_tgt.sum())}
    counts["dropped_empty_encoding"] = int(empty.sum())
    return np.flatnonzero(keep), counts


# ------------------------------------------------------------------------------------------------ the API
@dataclasses.dataclass
class TranslationData:
    """A prepared translation corpus. Batches follow the layout in `data.batching`.

    tokenizer: the target-side tokenizer (decodes model outputs); source_tokenizer encodes inputs (the same
    object when spm_shared). stats: per-split counts (pairs_read, skipped_*, truncated_*, dropped_*,
    examples), tokenizer and timing info, and the training batch layout.
    """

    config: ml_collections.ConfigDict
    tokenizer: Tokenizer
    source_tokenizer: Tokenizer
    stats: dict
    seed: int
    process_index: int
    process_count: int
    batch_multiple: int
    _corpus: object = dataclasses.field(repr=False)
    _train: batching.EncodedPairs = dataclasses.field(repr=False)
    _train_ids: np.ndarray = dataclasses.field(repr=False)
    _fingerprint: str = dataclasses.field(repr=False)
    _examples: dict = dataclasses.field(default_factory=dict, repr=False)
    _eval: dict = dataclasses.field(default_factory=dict, repr=False)
    _plans: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def vocab_size(self) -> int:
        """Largest vocabulary of the two sides (they are equal unless a corpus is too small)."""
        return max(self.tokenizer.vocab_size, self.source_tokenizer.vocab_size)

    @property
    def num_train_examples(self) -> int:
        return len(self._train_ids)

    # ---- training
    def _lengths(self) -> tuple[np.ndarray, np.ndarray]:
        return self._train.lengths(self.config.max_source_len, self.config.max_target_len)

    def _bucketing(self) -> tuple[list[int], list[int]]:
        c = self.config
        lengths = batching.bucket_lengths(c.bucket_boundaries, c.max_source_len, c.max_target_len)
        return lengths, batching.bucket_batch_sizes(lengths, c.batch_tokens, self.batch_multiple)

    def plan(self, epoch: int) -> list:
        """Global batch specs of one epoch: row lists (packing) or (bucket, ids) pairs (bucketing)."""
        if epoch not in self._plans:
            if len(self._plans) >= 2:
                self._plans.pop(min(self._plans))
            self._plans[epoch] = self._make_plan(epoch)
        return self._plans[epoch]

    def _make_plan(self, epoch: int) -> list:
        c = self.config
        rng = np.random.default_rng([self.seed, epoch])
        order = self._train_ids[rng.permutation(len(self._train_ids))]
        src_len, tgt_len = self._lengths()
        if c.packing:
            rows = batching.pack_rows(order, src_len, tgt_len, c.max_source_len, c.max_target_len)
            return [rows[b * c.batch_size:(b + 1) * c.batch_size] for b in range(len(rows) // c.batch_size)]
        lengths, sizes = self._bucketing()
        return batching.bucket_plan(order, src_len, tgt_len, lengths, sizes, rng)

    def make_batch(self, spec) -> dict[str, np.ndarray]:
        """This host's part of a global batch spec from `plan`."""
        c = self.config
        if c.packing:
            per_host = len(spec) // self.process_count
            rows = spec[self.process_index * per_host:(self.process_index + 1) * per_host]
            return batching.packed_batch(rows, self._train, c.max_source_len, c.max_target_len)
        lengths, _ = self._bucketing()
        bucket, ids = spec
        per_host = len(ids) // self.process_count
        ids = ids[self.process_index * per_host:(self.process_index + 1) * per_host]
        width = lengths[bucket]
        return batching.padded_batch(ids, self._train, min(width, c.max_source_len),
                                     min(width, c.max_target_len))

    def train_iter(self):
        """A new infinite grain iterator over training batches from the start (epoch 0), with
        get_state()/set_state() for checkpointing."""
        return loader.epoch_iterator(self.plan, self.make_batch, self._fingerprint, self.config.prefetch)

    def train_shapes(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """The distinct host-local (inputs, targets) shapes training batches can have."""
        c = self.config
        if c.packing:
            b = c.batch_size // self.process_count
            return [((b, c.max_source_len), (b, c.max_target_len))]
        lengths, sizes = self._bucketing()
        return [((s // self.process_count, min(L, c.max_source_len)), (s // self.process_count,
                 min(L, c.max_target_len))) for L, s in zip(lengths, sizes)]

    # ---- evaluation
    def examples(self, split: str) -> list[tuple[str, str]]:
        """All (source text, reference text) pairs of 'validation' or 'test' (or 'train'), in corpus order;
        eval_batches(split) holds the same examples in the same order."""
        if split not in splits.SPLITS:
            raise DataError(f"split must be one of {splits.SPLITS}; got {split!r}")
        if split not in self._examples:
            pairs, counts = self._corpus.read(split)
            self._examples[split] = pairs
            self.stats.setdefault(split, {}).update(counts)
        return self._examples[split]

    def eval_batches(self, split: str) -> list[dict[str, np.ndarray]]:
        """Fixed-shape batches of every example of `split`, in the order of examples(split): global batch b
        holds examples b * eval_batch_size ... ; this host gets its contiguous share of the rows. Rows past the
        last example are padding (all-zero inputs_segmentation). Overlong examples are truncated, never
        dropped, so the evaluation set is the same for every length setting."""
        if split not in self._eval:
            c = self.config
            pairs = self.examples(split)
            encoded = _encode(pairs, self.source_tokenizer, self.tokenizer)
            _, counts = _length_policy(encoded, c, drop=False)
            self.stats[split].update(counts)
            self.stats[split]["examples"] = len(pairs)
            g, per_host = c.eval_batch_size, c.eval_batch_size // self.process_count
            batches = []
            for start in range(0, len(pairs), g):
                ids = list(range(start, min(start + g, len(pairs))))
                ids = ids[self.process_index * per_host:(self.process_index + 1) * per_host]
                batches.append(batching.padded_batch(ids, encoded, c.max_source_len, c.max_target_len,
                                                     rows=per_host))
            self._eval[split] = batches
        return self._eval[split]

    def _normalized(self) -> list[str]:
        """A line counting what reading the text files changed (BOMs dropped, CRLF endings), if anything."""
        c = self.config
        splits_read = [s for s in splits.SPLITS if s in self.stats and (s == "train" or c[f"{s}_files"])]
        bom = sum(self.stats[s].get("bom_stripped", 0) for s in splits_read)
        crlf = sum(self.stats[s].get("crlf_lines", 0) for s in splits_read)
        if not bom and not crlf:
            return []
        return [f"normalized: byte-order mark dropped from {bom} file(s), CRLF line endings on {crlf} line(s)"]

    def describe(self) -> str:
        """A few lines for the run log: corpus, tokenizer, counts, batch layout."""
        c = self.config
        name = c.tfds_name if c.source == "tfds" else c.train_files if c.source == "text_files" else c.source
        t = self.stats["train"]
        lines = [f"data: {name} {c.source_lang}->{c.target_lang}, {t['examples']} training pairs "
                 f"(read {t['pairs_read']}, skipped {sum(v for k, v in t.items() if k.startswith('skipped'))}, "
                 f"dropped {t['dropped_overlong'] + t['dropped_empty_encoding']}, truncated "
                 f"{t['truncated_source']} source / {t['truncated_target']} target)",
                 f"tokenizer: {self.stats['tokenizer']['model_type']} vocab {self.vocab_size} "
                 f"({'shared' if c.spm_shared else 'separate'}) at {self.tokenizer.path}",
                 f"batches: {self.stats['batches']}",
                 *self._normalized(),
                 f"data ready in {self.stats['timing']['total_s']:.1f}s "
                 f"({', '.join(f'{k} {v:.1f}s' for k, v in self.stats['timing'].items() if k != 'total_s')})"]
        return "\n".join(lines)


def build_translation(cfg: ml_collections.ConfigDict, *, workdir: str, seed: int, process_index: int = 0,
                      process_count: int = 1) -> TranslationData:
    """Reads the corpus named by `cfg` (see `default_translation_config`), trains or reuses its SentencePiece
    model (training split only), encodes the training split and sets up batching for this host."""
    validate_translation_config(cfg)
    check_translation_sources(cfg)
    cfg = ml_collections.ConfigDict(cfg.to_dict())
    if not 0 <= process_index < process_count:
        raise DataError(f"process_index {process_index} out of range for process_count {process_count}")
    multiple = loader.resolve_batch_multiple(cfg.batch_multiple)
    if multiple % process_count:
        raise DataError(f"batch_multiple {multiple} must divide by process_count {process_count}")
    for name in ("batch_size", "eval_batch_size"):
        if (cfg.packing or name == "eval_batch_size") and cfg[name] % multiple:
            raise DataError(f"{name} {cfg[name]} must be divisible by {multiple} (batch_multiple, default the "
                            f"device count) so every device gets the same number of rows")
    cache_dir = cfg.cache_dir or default_cache_dir()
    timing = {}
    t0 = time.perf_counter()
    corpus = _open_corpus(cfg, cache_dir)
    timing["open_s"] = time.perf_counter() - t0
    t = time.perf_counter()
    # Evaluation splits with a source of their own are read now, so a bad one fails before training starts.
    eval_reads = {split: corpus.read(split) for split in ("validation", "test")
                  if cfg.source != "text_files" or cfg[f"{split}_files"]}
    timing["read_eval_s"] = time.perf_counter() - t

    train_texts: dict = {}

    def read_train(purpose: str = ""):
        if purpose:  # only called when the cache misses: a phase of several seconds, said before it starts
            log.info("data: %s (first run only; cached in %s)", purpose, cache_dir)
        if "pairs" not in train_texts:
            t = time.perf_counter()
            train_texts["pairs"], train_texts["counts"] = corpus.read("train")
            timing["read_train_s"] = time.perf_counter() - t
        return train_texts["pairs"]

    settings = {"vocab_size": cfg.vocab_size, "model_type": cfg.spm_model_type, "max_sentences":
                cfg.spm_max_sentences, "character_coverage": cfg.spm_character_coverage}
    train_id = corpus.identity("train")
    spm_msg = f"training the SentencePiece tokenizer ({cfg.spm_model_type}, {cfg.vocab_size} pieces)"
    t = time.perf_counter()
    trained = []
    if cfg.spm_shared:
        key = tokenizer_key(train_id, {**settings, "langs": [cfg.source_lang, cfg.target_lang], "side": "shared"})
        tok, new = cached_tokenizer(key, "shared", lambda: [s for p in read_train(spm_msg) for s in p],
                                    cache_dir=cache_dir, workdir=workdir, **settings)
        src_tok = tgt_tok = tok
        trained.append(new)
    else:
        toks = []
        for side, lang, idx in (("source", cfg.source_lang, 0), ("target", cfg.target_lang, 1)):
            key = tokenizer_key(train_id, {**settings, "lang": lang, "side": side})
            tok, new = cached_tokenizer(key, side, lambda idx=idx: [p[idx] for p in read_train(spm_msg)],
                                        cache_dir=cache_dir, workdir=workdir, **settings)
            toks.append(tok)
            trained.append(new)
        src_tok, tgt_tok = toks
    timing["tokenizer_s"] = time.perf_counter() - t - timing.get("read_train_s", 0.0)

    enc_key = hashlib.sha256(json.dumps([train_id, _file_sha(src_tok.path), _file_sha(tgt_tok.path)]).encode())
    enc_path = os.path.join(cache_dir, "encoded", enc_key.hexdigest()[:16] + ".npz")
    if os.path.exists(enc_path):
        t = time.perf_counter()
        encoded, read_counts = _load_npz(enc_path)
        timing["load_encoded_s"] = time.perf_counter() - t
    else:
        pairs = read_train()
        log.info("data: encoding %d training pairs (first run only; cached in %s)", len(pairs), cache_dir)
        t = time.perf_counter()
        encoded = _encode(pairs, src_tok, tgt_tok)
        timing["encode_s"] = time.perf_counter() - t
        read_counts = train_texts["counts"]
        _save_npz(enc_path, encoded, read_counts)
    train_ids, length_counts = _length_policy(encoded, cfg, drop=cfg.overlong == "drop")

    fingerprint = hashlib.sha256(json.dumps({
        "train": train_id, "tokenizer": [_file_sha(src_tok.path), _file_sha(tgt_tok.path)], "seed": seed,
        "multiple": multiple, **{k: cfg[k] for k in ("max_source_len", "max_target_len", "overlong", "packing",
                                                     "batch_size", "batch_tokens", "bucket_boundaries")}},
        sort_keys=True, default=list).encode()).hexdigest()[:16]
    stats = {"train": {**read_counts, **length_counts, "examples": len(train_ids)},
             "tokenizer": {"trained_now": any(trained), "model_type": cfg.spm_model_type,
                           "vocab_size": tgt_tok.vocab_size, "path": tgt_tok.path},
             "timing": timing}
    data = TranslationData(cfg, tgt_tok, src_tok, stats, seed, process_index, process_count, multiple,
                           corpus, encoded, train_ids, fingerprint)
    for split, (pairs, counts) in eval_reads.items():
        data._examples[split] = pairs
        stats[split] = dict(counts)
    t = time.perf_counter()
    plan0 = data.plan(0)
    timing["plan_epoch_s"] = time.perf_counter() - t
    src_len, tgt_len = data._lengths()
    used_src = sum(int(src_len[i]) for spec in plan0 for i in _spec_ids(spec, cfg.packing))
    used_tgt = sum(int(tgt_len[i]) for spec in plan0 for i in _spec_ids(spec, cfg.packing))
    cap_src = sum(_spec_capacity(spec, cfg, data) for spec in plan0)
    cap_tgt = sum(_spec_capacity(spec, cfg, data, side="target") for spec in plan0)
    stats["batches"] = {"per_epoch": len(plan0), "shapes": data.train_shapes(),
                        "fill_source": round(used_src / max(cap_src, 1), 3),
                        "fill_target": round(used_tgt / max(cap_tgt, 1), 3),
                        "examples_per_epoch": sum(len(_spec_ids(s, cfg.packing)) for s in plan0)}
    if not plan0:
        raise DataError(f"the training split ({len(train_ids)} examples) fills no complete batch; lower "
                        f"batch_size / batch_tokens or use more data")
    timing["total_s"] = time.perf_counter() - t0
    return data


def _spec_ids(spec, packing: bool) -> list[int]:
    return [i for row in spec for i in row] if packing else spec[1]


def _spec_capacity(spec, cfg, data: TranslationData, side: str = "source") -> int:
    max_len = cfg.max_source_len if side == "source" else cfg.max_target_len
    if cfg.packing:
        return len(spec) * max_len
    lengths, _ = data._bucketing()
    return len(spec[1]) * min(lengths[spec[0]], max_len)
