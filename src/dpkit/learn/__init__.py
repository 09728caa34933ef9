"""dpkit.learn: private learning on floors F1-F4 (never the engine)."""
