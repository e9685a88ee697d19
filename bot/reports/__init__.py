"""Report stage: pictures of the list for its operators (``digestbot stats --html``),
from the store's figures; never writes the store, never sends."""
