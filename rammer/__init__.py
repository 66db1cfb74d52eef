"""`import rammer; rammer.load(OUT_DIR)(**inputs)`: the model-level Python API (see rtransform)."""
from rtransform import load  # noqa: F401
