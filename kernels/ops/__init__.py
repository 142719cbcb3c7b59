"""The operators: importing this package registers them in ``registry.REGISTRY``."""

from . import modulate, norm, rope  # noqa: F401
