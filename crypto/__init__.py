"""crypto package."""
