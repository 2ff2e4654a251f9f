"""Hardware arithmetic: the chip spec table, rooflines and model presets (shapes of the models
claims are about)."""
