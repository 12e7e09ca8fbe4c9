"""Transitional alias of ``studies.inprocess`` for the scripts not yet ported to the studies package; import
``studies.inprocess`` instead."""
from studies.inprocess import *  # noqa: F401,F403
