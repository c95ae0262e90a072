"""Text sources, tokenizers and the grain input pipeline."""
