"""The committed Bible corpus, its chapter splits, its TFDS builder, and the extraction's parser (data.sword)."""
import collections
import gzip
import os
import struct
import zlib

import numpy as np
import pytest

from data import splits, sword
from data.builders import bible_es_en

@pytest.fixture(scope="module")
def rows():
    return bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)


@pytest.fixture(scope="module")
def extract():
    return sword


def test_committed_corpus_is_clean(rows):
    assert len(rows) == 30761
    refs = [(b, c, v) for b, c, v, _, _ in rows]
    assert len(set(refs)) == len(refs)
    assert len({b for b, *_ in rows}) == 66
    for _, _, _, es, en in rows:
        assert es == es.strip() and en == en.strip() and "  " not in es + en
        assert not set("<>\t") & set(es + en), "markup or tabs left in the text"
    assert rows[0][3:] == ("En el principio crió Dios los cielos y la tierra.",
                           "In the beginning, God created the heavens and the earth.")


def test_splits_are_whole_chapters_disjoint_and_stable(rows):
    by_split = collections.Counter()
    chapters = collections.defaultdict(set)
    for b, c, v, _, _ in rows:
        split = bible_es_en.chapter_split(b, c)
        by_split[split] += 1
        chapters[split].add((b, c))
    # Pinned: the split is a pure function of "Book.Chapter", so these never change between runs.
    assert by_split == {"train": 28561, "validation": 874, "test": 1326}
    assert not chapters["train"] & chapters["test"] and not chapters["train"] & chapters["validation"]
    assert not chapters["validation"] & chapters["test"]
    assert by_split["test"] >= 1000


def test_assign_split_fractions_and_errors():
    keys = [f"k{i}" for i in range(4000)]
    got = collections.Counter(splits.assign_split(k, salt="s", validation_fraction=0.1, test_fraction=0.2)
                              for k in keys)
    assert abs(got["test"] / 4000 - 0.2) < 0.03 and abs(got["validation"] / 4000 - 0.1) < 0.03
    other_salt = [splits.assign_split(k, salt="t", validation_fraction=0.1, test_fraction=0.2) for k in keys]
    assert other_salt != [splits.assign_split(k, salt="s", validation_fraction=0.1, test_fraction=0.2)
                          for k in keys]
    with pytest.raises(ValueError, match="fractions"):
        splits.assign_split("k", salt="s", validation_fraction=0.6, test_fraction=0.5)


def test_tfds_builder_prepares_and_reads_through_data_source(tmp_path, rows, monkeypatch):
    # A few chapters of each split keep the test fast; the builder code path is the same.
    firsts = {s: [] for s in ("train", "validation", "test")}
    for b, c, *_ in rows:
        chapters = firsts[bible_es_en.chapter_split(b, c)]
        if (b, c) not in chapters and len(chapters) < 2:
            chapters.append((b, c))
    wanted = {bc for chapters in firsts.values() for bc in chapters}
    subset = [r for r in rows if r[:2] in wanted]
    path = tmp_path / "pairs.tsv.gz"
    path.write_bytes(gzip.compress(("book\tchapter\tverse\tes\ten\n" + "".join(
        f"{b}\t{c}\t{v}\t{es}\t{en}\n" for b, c, v, es, en in subset)).encode()))
    monkeypatch.setattr(bible_es_en.BibleEsEn, "CORPUS", str(path))
    builder = bible_es_en.BibleEsEn(data_dir=str(tmp_path / "tfds"), file_format="array_record")
    builder.download_and_prepare()
    assert builder.info.supervised_keys == ("es", "en")
    sources = builder.as_data_source()
    expected = {f"{b}.{c}.{v}": (es, en, bible_es_en.chapter_split(b, c)) for b, c, v, es, en in subset}
    seen = 0
    for split in ("train", "validation", "test"):
        for i in range(len(sources[split])):
            ex = sources[split][i]
            es, en, want_split = expected[ex["ref"].decode()]
            assert (ex["es"].decode(), ex["en"].decode(), split) == (es, en, want_split)
            seen += 1
    assert seen == len(subset) and {split for _, _, split in expected.values()} == set(firsts)


# ----------------------------------------------------------------------------- the extraction script
def write_ztext(root, module, testaments, lang="xx", versification="KJV"):
    """A tiny SWORD zText module: testaments maps 'ot'/'nt' to the list of index-slot texts."""
    data_path = f"modules/texts/ztext/{module.lower()}/"
    os.makedirs(root / "mods.d", exist_ok=True)
    (root / "mods.d" / f"{module.lower()}.conf").write_text(
        f"[{module}]\nDataPath=./{data_path}\nModDrv=zText\nCompressType=ZIP\nSourceType=OSIS\n"
        f"Lang={lang}\nVersification={versification}\nDescription=test\nVersion=1\n")
    os.makedirs(root / data_path, exist_ok=True)
    for testament, slots in testaments.items():
        raw = [s.encode() for s in slots]
        half = len(raw) // 2  # two blocks, to exercise the block index
        blocks = [b"".join(raw[:half]), b"".join(raw[half:])]
        bzs, bzz, offset = b"", b"", 0
        for block in blocks:
            packed = zlib.compress(block)
            bzs += struct.pack("<III", offset, len(packed), len(block))
            bzz += packed
            offset += len(packed)
        bzv, pos = b"", [0, 0]
        for i, r in enumerate(raw):
            b = 0 if i < half else 1
            bzv += struct.pack("<IIH", b, pos[b], len(r))
            pos[b] += len(r)
        for ext, blob in (("bzs", bzs), ("bzv", bzv), ("bzz", bzz)):
            (root / data_path / f"{testament}.{ext}").write_bytes(blob)


def book(osis, chapters):
    """Slots of one book: intro, then per chapter a heading and its verses (last verse closes it)."""
    slots = [f'<div osisID="{osis}" type="book"/>']
    for c, verses in enumerate(chapters, start=1):
        slots.append(f'<chapter n="{c}" osisID="{osis}.{c}" sID="{osis}.{c}"/>')
        for v, text in enumerate(verses, start=1):
            slots.append(text + (f'<chapter eID="{osis}.{c}"/>' if v == len(verses) else ""))
    return slots


def test_parser_reads_verses_by_chapter_markers(tmp_path, extract):
    ot = ["", "", *book("Gen", [['<w lemma="strong:H1">En</w> el <note>nota</note>principio.', "Dos."],
                                ["Uno.", "", "Tres."]])]
    nt = ["", "", *book("Matt", [["Libro."]]),
          # a whole book outside the versification, dumped into one slot, is skipped
          '<chapter osisID="Extra.1" sID="Extra.1"/>x<chapter eID="Extra.1"/>']
    write_ztext(tmp_path, "TestMod", {"ot": ot, "nt": nt})
    verses, conf, notes = extract.load_module(str(tmp_path), "TestMod", fix_drop_caps=False)
    assert conf["Versification"] == "KJV"
    assert verses == {("Gen", 1, 1): "En el principio.", ("Gen", 1, 2): "Dos.", ("Gen", 2, 1): "Uno.",
                      ("Gen", 2, 2): "", ("Gen", 2, 3): "Tres.", ("Matt", 1, 1): "Libro."}
    assert notes["books outside the versification (skipped)"] == ["Extra.1, Extra.1"]


def test_clean_osis_strips_markup_and_keeps_canonical_titles(extract):
    raw = ('<div type="x-milestone" subType="x-preverse" sID="pv1"/><title type="psalm" canonical="true">A Psalm.'
           '</title> <title type="x-section">Heading</title><l sID="l1"/><w lemma="strong:H1">Yahweh</w>,'
           '<note placement="foot"><reference>3:1 </reference>Hebrew note.</note> how my <q who="x">“foes”</q> '
           '<speaker>Beloved</speaker> &amp; <transChange type="added">are</transChange> many!<l eID="l1"/>')
    assert extract.clean_osis(raw, fix_drop_caps=False) == "A Psalm. Yahweh, how my “foes” & are many!"
    assert extract.clean_osis("¡OH Jehová, EN el ALEPH. MENE, MENE", fix_drop_caps=True) == \
        "¡Oh Jehová, En el ALEPH. MENE, MENE"


def test_alignment_drops_shifted_chapters_and_length_outliers(extract):
    rng = np.random.default_rng(0)
    source, target = {}, {}
    for c in range(1, 9):
        lengths = rng.integers(20, 300, size=25)
        for v, n in enumerate(lengths, start=1):
            source[("Gen", c, v)] = "s" * int(n)
            target[("Gen", c, v)] = "t" * int(n * 1.05 * np.exp(rng.normal(0, 0.05)))
    for v in range(1, 25):  # chapter 3: source verse v is target verse v - 1 (offset -1)
        target[("Gen", 3, v)] = target[("Gen", 3, v + 1)]
    target[("Gen", 5, 7)] = "t" * 2000  # one pair with a wildly different length
    pairs, report = extract.align(source, target)
    kept = {(b, c, v) for b, c, v, _, _ in pairs}
    assert report["dropped_shifted_chapters"] == ["Gen 3 (25 verses, offsets [-1])"]
    assert report["dropped_length_outliers"] == 1 and ("Gen", 5, 7) not in kept
    assert len(kept) == 8 * 25 - 25 - 1


def test_extraction_output_is_reproducible_gzip(tmp_path, extract):
    pairs = [("Gen", 1, 1, "Hola.", "Hello."), ("Gen", 1, 2, "Adiós.", "Bye.")]
    a, b = tmp_path / "a.tsv.gz", tmp_path / "b.tsv.gz"
    extract.write_tsv(pairs, str(a), "es", "en")
    extract.write_tsv(pairs, str(b), "es", "en")
    assert a.read_bytes() == b.read_bytes()
    assert bible_es_en.read_pairs(str(a)) == pairs
