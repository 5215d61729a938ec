"""Tools run by hand from the checkout (``python -m scripts.<name>``), not part of the installed package:
``record_trajectories`` records the synthetic task source's bundled trajectory corpus from the scripted sessions
of ``trajectory_sessions``."""
