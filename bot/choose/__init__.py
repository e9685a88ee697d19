"""Choose stage: which stored entries a subscriber gets, and why.

``tagging`` (tag rules), ``filters`` (the filter language, evaluation and
explanations) are pure; ``select`` reads the window and the ledger and ranks.
Never writes the store, never renders or sends.
"""
