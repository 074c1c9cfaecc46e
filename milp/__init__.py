"""PuLP models (MO-SOS: offload + recompute + implementation selection) and their decoding into plans."""
