"""Transitional alias of ``studies.stats`` for the scripts not yet ported to the studies package; import
``studies.stats`` instead."""
from studies.stats import *  # noqa: F401,F403
