"""Calibration harness: measures kernels and collectives with torch and writes a profile
(CSV, schema in :mod:`sim3d_calibrate.profile_io`) that :class:`sim3d.costs.profile.Profile` reads.

``import sim3d_calibrate`` does not import torch; :func:`run_calibration` does.
"""
from .profile_io import COLUMNS, KINDS, PROFILES_DIR
from .run import run_calibration

__all__ = ["run_calibration", "COLUMNS", "KINDS", "PROFILES_DIR"]
