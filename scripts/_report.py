"""Transitional alias of ``studies.report`` for the scripts not yet ported to the studies package; import
``studies.report`` instead."""
from studies.report import *  # noqa: F401,F403
