"""The worker: the example's shared decision (shared/configdata.py)."""

import wasmpilot_guest as guest
from configdata import ConfigData

PhaseWorker = guest.export_phase(ConfigData)
