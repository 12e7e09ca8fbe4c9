"""Bring-your-own parallel corpus: read sentence pairs from plain text files.

A file spec is either

- a TSV file (name ends in ``.tsv`` or ``.tsv.gz``): one pair per line, ``source<TAB>target``; or
- a path prefix: ``PREFIX.<source_lang>`` and ``PREFIX.<target_lang>`` (each optionally ``.gz``), one
  sentence per line, line i of one file paired with line i of the other (the Moses / fairseq convention).

Bad input never pairs sentences silently wrong:

- a missing file raises DataError naming the path and the config field, and so does a file without one usable
  pair (empty, or every line skipped);
- two sides with different line counts raise DataError (no pairing is possible);
- an empty side, a line that is not valid UTF-8, or a TSV line without exactly two fields is skipped and
  counted (``on_bad_line="skip"``) or raises DataError naming file and line (``on_bad_line="error"``).

Files are normalized as they are read, and the changes counted: a UTF-8 byte-order mark at the start of a file
is dropped (``bom_stripped``: files), and Windows line endings lose their carriage return (``crlf_lines``).
"""
from __future__ import annotations

import collections
import gzip
import os

from data.errors import DataError

BAD_LINE_POLICIES = ("skip", "error")


def resolve_files(spec: str, source_lang: str, target_lang: str, *, field: str) -> tuple[str, ...]:
    """The file(s) a spec names: (tsv,) or (source_file, target_file). Raises DataError if one is absent."""
    if spec.endswith((".tsv", ".tsv.gz")):
        if not os.path.isfile(spec):
            raise DataError(f"{field}: TSV file {spec!r} does not exist")
        return (spec,)
    paths = []
    for lang in (source_lang, target_lang):
        candidates = [f"{spec}.{lang}", f"{spec}.{lang}.gz"]
        found = [p for p in candidates if os.path.isfile(p)]
        if not found:
            raise DataError(f"{field}: neither {candidates[0]!r} nor {candidates[1]!r} exists (a spec is "
                            f"a .tsv file or a prefix PREFIX with files PREFIX.{source_lang} and "
                            f"PREFIX.{target_lang})")
        paths.append(found[0])
    return tuple(paths)


BOM = b"\xef\xbb\xbf"


def _read_bytes(path: str, size: int = -1) -> bytes:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read(size)


def _read_lines(path: str, counts: dict[str, int]) -> list[bytes]:
    """The lines of ``path`` without their line ending, a leading BOM dropped; adds to counts' bom_stripped
    and crlf_lines."""
    data = _read_bytes(path)
    if data.startswith(BOM):
        data = data[len(BOM):]
        counts["bom_stripped"] += 1
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    crlf = [line.endswith(b"\r") for line in lines]
    counts["crlf_lines"] += sum(crlf)
    return [line[:-1] if cr else line for line, cr in zip(lines, crlf)]


def read_parallel(spec: str, *, source_lang: str, target_lang: str, on_bad_line: str = "skip",
                  field: str = "text_files") -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Pairs (source, target) from a file spec, plus counts: lines, skipped_empty, skipped_invalid_utf8,
    skipped_bad_fields, bom_stripped (files), crlf_lines."""
    if on_bad_line not in BAD_LINE_POLICIES:
        raise DataError(f"data.on_bad_line={on_bad_line!r}; expected one of {BAD_LINE_POLICIES}")
    files = resolve_files(spec, source_lang, target_lang, field=field)
    counts: dict[str, int] = collections.Counter()
    pairs: list[tuple[str, str]] = []

    def bad(kind: str, where: str, detail: str) -> None:
        if on_bad_line == "error":
            raise DataError(f"{where}: {detail} (set on_bad_line='skip' to skip and count such lines)")
        counts[f"skipped_{kind}"] += 1

    if len(files) == 1:
        rows = [(i, line.split(b"\t")) for i, line in enumerate(_read_lines(files[0], counts), start=1)]
        located = [(f"{files[0]}:{i}", f"{files[0]}:{i}", fields) for i, fields in rows]
    else:
        src_lines, tgt_lines = _read_lines(files[0], counts), _read_lines(files[1], counts)
        if len(src_lines) != len(tgt_lines):
            raise DataError(f"{field}: {files[0]} has {len(src_lines)} lines but {files[1]} has "
                            f"{len(tgt_lines)}; the sides of a parallel corpus must have one line per pair")
        located = [(f"{files[0]}:{i}", f"{files[1]}:{i}", [s, t])
                   for i, (s, t) in enumerate(zip(src_lines, tgt_lines), start=1)]
    counts["lines"] = len(located)
    for src_where, tgt_where, fields in located:
        if len(fields) != 2:
            bad("bad_fields", src_where, f"expected 2 tab-separated fields (source, target), found {len(fields)}")
            continue
        texts = []
        for raw, where in zip(fields, (src_where, tgt_where)):
            try:
                texts.append(raw.decode("utf-8").strip())
            except UnicodeDecodeError as e:
                bad("invalid_utf8", where, f"not valid UTF-8 ({e.reason} at byte {e.start})")
                break
        if len(texts) != 2:
            continue
        if not texts[0] or not texts[1]:
            bad("empty", src_where if not texts[0] else tgt_where, "empty sentence")
            continue
        pairs.append((texts[0], texts[1]))
    for key in ("skipped_empty", "skipped_invalid_utf8", "skipped_bad_fields", "bom_stripped", "crlf_lines"):
        counts.setdefault(key, 0)
    if not pairs:
        skipped = ", ".join(f"{counts[k]} {k[len('skipped_'):].replace('_', ' ')}" for k in
                            ("skipped_empty", "skipped_invalid_utf8", "skipped_bad_fields") if counts[k])
        raise DataError(f"{field}: {' + '.join(files)} holds no usable sentence pair ({counts['lines']} lines"
                        + (f"; skipped: {skipped}" if skipped else "") + ")")
    return pairs, dict(counts)


def file_identity(spec: str, source_lang: str, target_lang: str, *, field: str) -> list[tuple[str, int, int]]:
    """(absolute path, size, mtime_ns) of each file of a spec: changes whenever the files change. A file that
    starts with a byte-order mark gets a fourth element, "bom" (such files read differently since the BOM is
    dropped, so what was cached from them before is not reused)."""
    out = []
    for path in resolve_files(spec, source_lang, target_lang, field=field):
        st = os.stat(path)
        entry = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
        out.append(entry + ("bom",) if _read_bytes(path, len(BOM)) == BOM else entry)
    return out
