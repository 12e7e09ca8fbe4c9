"""Transitional alias of ``studies.runner`` for the scripts not yet ported to the studies package; import
``studies.runner`` instead."""
from studies.runner import *  # noqa: F401,F403
