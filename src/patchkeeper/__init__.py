"""patchkeeper: versioned patch sets over an installed Python package, applied atomically."""

__version__ = "0.1.0"
