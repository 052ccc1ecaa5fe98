"""push."""
