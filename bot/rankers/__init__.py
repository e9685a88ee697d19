"""Rankers stage: an outside ranker an operator names, asked once a planning pass for
its order of each reader's candidates (``protocol``, ``client``), and the judge that
weighs it against the built-in ranking by readers' ratings (``interleave``).  Never
reads or writes the store; never sends an address or a token."""
