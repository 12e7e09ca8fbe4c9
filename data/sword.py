"""The Spanish-English Bible corpus's extraction from two SWORD zText modules (``scripts/extract_bible_corpus.py`` is
its command line): read the Reina-Valera 1909 (Debian ``sword-text-sparv``) and World English Bible
(``sword-text-web``) modules with our own parser of the SWORD zText format, strip the OSIS markup, align verses by
book/chapter/verse, drop misaligned chapters and outlier pairs, and write the TSV ``data.bible`` reads.

The zText format (all integers little-endian):

- ``{ot,nt}.bzs``: one 12-byte record per compressed block: offset in ``.bzz``, compressed size, raw size.
- ``{ot,nt}.bzv``: one 10-byte record per index slot: block number (u32), offset in the raw block (u32),
  size (u16). Slot 0 is the module heading, slot 1 the testament heading, then per book one book-intro slot
  and per chapter one chapter-heading slot followed by one slot per verse, in the module's versification order.
- ``{ot,nt}.bzz``: the zlib-compressed blocks.

Verse keys come from the module content, not from a versification table: osis2mod writes
``<chapter osisID="Gen.1" sID=.../>`` into each chapter-heading slot and ``<chapter eID="Gen.1"/>`` into the
chapter's last verse, so verse ``v`` of a chapter is the slot ``v`` places after its heading slot. The parser
checks this layout (every chapter opened once, closed after it opened, no verse text outside a chapter) and
fails loudly when a module does not follow it.
"""
from __future__ import annotations

import collections
import configparser
import gzip
import html
import io
import math
import os
import re
import struct
import unicodedata
import zlib

import numpy as np

SWORD_DIR = "/usr/share/sword"
SOURCE_MODULE = "spaRV1909eb"  # Spanish, Reina-Valera 1909, versification KJV.
TARGET_MODULE = "engWEB2015eb"  # English, World English Bible, versification NRSVA.
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpora", "bible_es_en", "pairs.tsv.gz")

# Chapters whose verse-offset path (see `verse_offsets`) leaves offset 0 anywhere are dropped. The penalty
# is the cost of switching offset, in units of squared z-scores of the log length ratio; 10 keeps only
# sustained shifts (3+ verses) and ignores single noisy verses.
SHIFT_PENALTY = 10.0
MAX_SHIFT = 6
# A pair whose log length ratio lies further than this many robust standard deviations from the median is
# dropped as misaligned (a verse split differently, a postscript on one side only).
OUTLIER_Z = 5.0

_CHAPTER_START = re.compile(r'<chapter\b[^>]*\bsID="[^"]*"[^>]*/>')
_CHAPTER_END = re.compile(r'<chapter\b[^>]*\beID="([^"]+)"[^>]*/>')
_OSIS_ID = re.compile(r'\bosisID="([^"]+)"')


def read_conf(sword_dir: str, module: str) -> dict[str, str]:
    """The module's ``mods.d/*.conf`` entries (last value wins for repeated keys)."""
    mods_d = os.path.join(sword_dir, "mods.d")
    names = [n for n in (os.listdir(mods_d) if os.path.isdir(mods_d) else []) if n.lower() == module.lower() + ".conf"]
    if not names:
        raise FileNotFoundError(f"SWORD module config {module}.conf not found in {mods_d}; install the Debian "
                                f"package first (sword-text-sparv / sword-text-web)")
    path = os.path.join(mods_d, names[0])
    parser = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#",))
    parser.optionxform = str
    parser.read(path, encoding="utf-8")
    if module not in parser:
        raise ValueError(f"{path} has no section [{module}]")
    return dict(parser[module])


def read_ztext(module_dir: str, testament: str) -> list[bytes]:
    """All index slots of one testament ('ot' or 'nt') as raw bytes; empty slots are b''."""
    def read(ext: str) -> bytes:
        with open(os.path.join(module_dir, f"{testament}.{ext}"), "rb") as f:
            return f.read()

    bzs, bzv, bzz = read("bzs"), read("bzv"), read("bzz")
    if len(bzs) % 12 or len(bzv) % 10:
        raise ValueError(f"{module_dir}/{testament}: index sizes {len(bzs)}, {len(bzv)} are not multiples of 12, 10")
    blocks: list[bytes | None] = [None] * (len(bzs) // 12)

    def block(i: int) -> bytes:
        if blocks[i] is None:
            offset, compressed, raw = struct.unpack_from("<III", bzs, 12 * i)
            data = zlib.decompress(bzz[offset:offset + compressed])
            if len(data) != raw:
                raise ValueError(f"{module_dir}/{testament}: block {i} inflates to {len(data)} bytes, index says {raw}")
            blocks[i] = data
        return blocks[i]

    slots = []
    for i in range(len(bzv) // 10):
        block_no, offset, size = struct.unpack_from("<IIH", bzv, 10 * i)
        slots.append(block(block_no)[offset:offset + size] if size else b"")
    return slots


def index_verses(slots: list[bytes], where: str, unplaced: list[str],
                 irregular: list[str]) -> dict[tuple[str, int, int], str]:
    """Maps (book, chapter, verse) to the raw OSIS text of that verse, from the chapter markers in the slots.

    Chapter ranges found in slots that hold whole books outside the versification are appended to `unplaced`;
    chapters ended by the next chapter's heading instead of their own end marker, and end markers found
    inside another chapter, to `irregular`.
    """
    verses: dict[tuple[str, int, int], str] = {}
    current: str | None = None
    heading = -1
    seen: set[str] = set()
    for i, raw in enumerate(slots):
        text = raw.decode("utf-8")
        starts = list(_CHAPTER_START.finditer(text))
        if len(starts) > 1 or (starts and _CHAPTER_END.search(text)):
            # A whole book the versification has no place for (e.g. WEB's Greek Daniel under NRSVA) lands in
            # a single book-intro slot; it has no verse slots and is skipped.
            if current is not None:
                raise ValueError(f"{where}: slot {i} holds several chapters inside chapter {current}")
            unplaced.append(", ".join(_OSIS_ID.search(m.group(0)).group(1) for m in (starts[0], starts[-1])))
            continue
        start = starts[0] if starts else None
        if start:
            if current is not None:
                # The end marker went elsewhere (seen in WEB's Greek Esther); the chapter ends here anyway.
                irregular.append(f"{current} not closed")
            osis_id = _OSIS_ID.search(start.group(0))
            if osis_id is None:
                raise ValueError(f"{where}: chapter start without osisID in slot {i}: {start.group(0)}")
            current, heading = osis_id.group(1), i
            if current in seen:
                raise ValueError(f"{where}: chapter {current} opened twice")
            seen.add(current)
            continue
        if current is None:
            continue
        book, chapter = current.rsplit(".", 1)
        end = _CHAPTER_END.search(text)
        if end and end.group(1) != current:
            irregular.append(f"end of {end.group(1)} inside {current}")
            end = None
        # Text after the chapter end marker (book end, appendices, glossaries) is not part of the verse.
        verses[(book, int(chapter), i - heading)] = text[:end.start()] if end else text
        if end:
            current = None
    if current is not None:
        irregular.append(f"{current} not closed")
    return verses


def clean_osis(raw: str, *, fix_drop_caps: bool) -> str:
    """Plain verse text: notes, non-canonical titles and speaker labels removed, other markup stripped."""
    text = re.sub(r"<note\b.*?</note>", " ", raw, flags=re.S)
    text = re.sub(r'<title\b(?![^>]*canonical="true")[^>]*>.*?</title>', " ", text, flags=re.S)
    text = re.sub(r"<speaker\b.*?</speaker>", " ", text, flags=re.S)
    # Inline elements (Strong's-tagged words, added words, quotes, names) vanish without a space.
    inline = r"(?:w|transChange|q|seg|divineName|name|foreign|hi|rdg|catchWord)"
    text = re.sub(rf"</?{inline}\b[^>]*>", "", text)
    text = re.sub(r"<[^>]*>", " ", text)  # block elements (l, lg, div, milestone, lb, item) become a space
    text = html.unescape(text)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r" ([,.;:!?)\]”’»])", r"\1", text)
    text = re.sub(r"([(\[“‘«¿¡]) ", r"\1", text)
    if fix_drop_caps:
        # Printed chapter openings ("EN el principio", "¡OH Jehová") and the small-capital JEHOVÁ: an
        # all-capital word followed by a word with a lower-case letter is capitalized normally.
        text = re.sub(r"\b([^\W\d_]{2,})(?= \S*[a-záéíóúüñ])",
                      lambda m: m.group(1).capitalize() if m.group(1).isupper() else m.group(1), text)
    return unicodedata.normalize("NFC", text)


def load_module(sword_dir: str, module: str, *, fix_drop_caps: bool) -> tuple[dict, dict[str, str], dict]:
    """(verses, conf, notes) for one module: verses maps (book, chapter, verse) to cleaned text; notes lists
    the chapter ranges skipped because the versification has no slots for them and irregular chapter
    markers."""
    conf = read_conf(sword_dir, module)
    if conf.get("ModDrv", "").lower() != "ztext":
        raise ValueError(f"{module}: ModDrv={conf.get('ModDrv')!r}; this parser reads zText modules only")
    if conf.get("CompressType", "ZIP").upper() != "ZIP":
        raise ValueError(f"{module}: CompressType={conf.get('CompressType')!r}; only ZIP (zlib) is supported")
    if conf.get("SourceType", "OSIS").upper() != "OSIS":
        raise ValueError(f"{module}: SourceType={conf.get('SourceType')!r}; only OSIS markup is supported")
    module_dir = os.path.join(sword_dir, conf["DataPath"].lstrip("./").rstrip("/"))
    verses, notes = {}, {"books outside the versification (skipped)": [], "irregular chapter markers": []}
    for testament in ("ot", "nt"):
        raw = index_verses(read_ztext(module_dir, testament), f"{module}/{testament}",
                           *notes.values())
        for key, text in raw.items():
            verses[key] = clean_osis(text, fix_drop_caps=fix_drop_caps)
    return verses, conf, notes


def verse_offsets(src_len: np.ndarray, tgt_len: np.ndarray, mu: float, sigma: float) -> list[int]:
    """Most likely offset d per source verse (verse i pairs with target verse i + d), by dynamic programming.

    Cost of pairing verse i with target i + d: the squared z-score of their log length ratio (capped at 8, and
    8 when i + d falls outside the chapter); switching offset costs SHIFT_PENALTY, as does starting at d != 0.
    """
    n = len(src_len)
    offsets = list(range(-MAX_SHIFT, MAX_SHIFT + 1))
    log_src, log_tgt = np.log(src_len) + mu, np.log(tgt_len)
    cost = np.full((n, len(offsets)), 8.0)
    for s, d in enumerate(offsets):
        lo, hi = max(0, -d), min(n, n - d)
        if hi <= lo:
            continue
        z = (log_tgt[lo + d:hi + d] - log_src[lo:hi]) / sigma
        cost[lo:hi, s] = np.minimum(z * z / 2, 8.0)
    switch = np.where(np.eye(len(offsets), dtype=bool), 0.0, SHIFT_PENALTY)
    total = cost[0] + switch[offsets.index(0)]
    back = np.zeros((n, len(offsets)), dtype=np.int64)
    for i in range(1, n):
        candidates = total[:, None] + switch  # [from, to]
        back[i] = np.argmin(candidates, axis=0)
        total = candidates[back[i], np.arange(len(offsets))] + cost[i]
    state = int(np.argmin(total))
    path = [state]
    for i in range(n - 1, 0, -1):
        state = int(back[i, state])
        path.append(state)
    return [offsets[s] for s in reversed(path)]


def align(source: dict, target: dict) -> tuple[list[tuple[str, int, int, str, str]], dict]:
    """Verse pairs in canonical order after dropping empty, shifted and outlier verses; plus a report."""
    report: dict = collections.OrderedDict()
    common = [k for k in source if k in target]
    report["source_verses"] = len(source)
    report["target_verses"] = len(target)
    report["shared_keys"] = len(common)
    pairs = [k for k in common if source[k] and target[k]]
    report["dropped_empty"] = len(common) - len(pairs)

    log_ratio = np.array([math.log(len(target[k]) / len(source[k])) for k in pairs])
    mu = float(np.median(log_ratio))
    sigma = float(1.4826 * np.median(np.abs(log_ratio - mu)))
    report["log_length_ratio_median"] = round(mu, 4)
    report["log_length_ratio_robust_sd"] = round(sigma, 4)

    chapters: dict[tuple[str, int], list[tuple[str, int, int]]] = collections.OrderedDict()
    for k in pairs:
        chapters.setdefault(k[:2], []).append(k)
    shifted = []
    for chapter, keys in chapters.items():
        offsets = verse_offsets(np.array([len(source[k]) for k in keys], float),
                                np.array([len(target[k]) for k in keys], float), mu, sigma)
        if any(offsets):
            shifted.append((chapter, len(keys), sorted(set(offsets))))
    shifted_set = {c for c, _, _ in shifted}
    report["dropped_shifted_chapters"] = [f"{b} {c} ({n} verses, offsets {o})" for (b, c), n, o in shifted]
    report["dropped_shifted_verses"] = sum(n for _, n, _ in shifted)

    kept, outliers = [], []
    for k, r in zip(pairs, log_ratio):
        if k[:2] in shifted_set:
            continue
        if abs(r - mu) > OUTLIER_Z * sigma:
            outliers.append(k)
            continue
        kept.append((k[0], k[1], k[2], source[k], target[k]))
    report["dropped_length_outliers"] = len(outliers)
    report["pairs"] = len(kept)
    report["books"] = len({k[0] for k in kept})
    report["chapters"] = len({k[:2] for k in kept})
    return kept, report


def write_tsv(pairs, path: str, source_lang: str, target_lang: str) -> None:
    """Writes a byte-reproducible gzip TSV with header ``book chapter verse <src> <tgt>``."""
    buf = io.StringIO()
    buf.write(f"book\tchapter\tverse\t{source_lang}\t{target_lang}\n")
    for book, chapter, verse, src, tgt in pairs:
        if "\t" in src + tgt or "\n" in src + tgt:
            raise ValueError(f"{book} {chapter}:{verse} contains a tab or newline after cleaning")
        buf.write(f"{book}\t{chapter}\t{verse}\t{src}\t{tgt}\n")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
        f.write(buf.getvalue().encode("utf-8"))


def extract(sword_dir: str = SWORD_DIR, source_module: str = SOURCE_MODULE, target_module: str = TARGET_MODULE,
            out: str = DEFAULT_OUT) -> list[str]:
    """Extract the aligned corpus of ``source_module`` and ``target_module`` under ``sword_dir`` into ``out``; the
    lines describing it (each module's version and licence, every note, count and dropped chapter)."""
    source, source_conf, source_notes = load_module(sword_dir, source_module, fix_drop_caps=True)
    target, target_conf, target_notes = load_module(sword_dir, target_module, fix_drop_caps=False)
    pairs, report = align(source, target)
    write_tsv(pairs, out, source_conf.get("Lang", "src"), target_conf.get("Lang", "tgt"))
    lines = [f"{name}: {conf.get('Description')} version {conf.get('Version')}, "
             f"Versification={conf.get('Versification', 'KJV')}, license: {conf.get('DistributionLicense')}"
             for name, conf in (("source", source_conf), ("target", target_conf))]
    for name, notes in (("source", source_notes), ("target", target_notes)):
        lines += [f"{name} {what}: {'; '.join(items) or 'none'}" for what, items in notes.items()]
    for key, value in report.items():
        lines += [f"{key}: {len(value)}"] + [f"  {item}" for item in value] if isinstance(value, list) else [
            f"{key}: {value}"]
    return lines + [f"wrote {os.path.normpath(out)} ({os.path.getsize(out) / 1e6:.2f} MB)"]
