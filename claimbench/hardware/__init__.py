"""Hardware: the chip spec table, rooflines, model presets (shapes of the models claims are
about), the host CPU and the machine a run is on (detection.py)."""
