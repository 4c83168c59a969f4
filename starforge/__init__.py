"""StarForge: declared, versioned, digest-locked algorithm plugins for RL training jobs."""

__version__ = "0.1.0"
