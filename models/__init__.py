"""Decoder, attention, positional schemes and sharding rules."""
