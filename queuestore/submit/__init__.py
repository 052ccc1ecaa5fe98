"""submit."""
