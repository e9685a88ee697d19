"""digestbot: research-feed digest dumps in, personal daily emails out."""

__version__ = "0.1.0"
