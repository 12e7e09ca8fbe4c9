"""Extract the Spanish-English Bible corpus from two SWORD zText modules into
``data/corpora/bible_es_en/pairs.tsv.gz`` (the format and the alignment: ``data/sword.py``).

    apt-get install -y sword-text-web sword-text-sparv
    python scripts/extract_bible_corpus.py            # writes the committed corpus and prints its counts
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from data import sword


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sword-dir", default=sword.SWORD_DIR, help="SWORD library root (mods.d/ and modules/)")
    parser.add_argument("--source-module", default=sword.SOURCE_MODULE)
    parser.add_argument("--target-module", default=sword.TARGET_MODULE)
    parser.add_argument("--out", default=sword.DEFAULT_OUT)
    args = parser.parse_args(argv)
    print("\n".join(sword.extract(args.sword_dir, args.source_module, args.target_module, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
