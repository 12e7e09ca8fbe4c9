"""``python -m studies``: see ``studies.cli``."""
import sys

from engine import cli
from studies.cli import main

sys.exit(cli.script(main))
