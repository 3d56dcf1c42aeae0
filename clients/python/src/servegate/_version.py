# The package's version; the build backend refuses to build when it differs from pyproject.toml's.
__version__ = "0.1.0"
