"""Experiment configs (ml_collections `get_config()` files) and their validation."""
