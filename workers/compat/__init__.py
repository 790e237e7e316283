"""Modules WMLA-style scripts import (``fabric_model``, ``callbacks``, ``pth_parameter_mgr``).

The learner puts this folder on ``sys.path``; these are top-level modules there.
"""
