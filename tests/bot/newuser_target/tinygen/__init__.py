"""tinygen: a toy streaming text generator."""
