"""rtransform package."""
