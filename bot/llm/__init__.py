"""A language model behind the OpenAI-compatible API: what is asked of it and what of its
answers may reach a reader (``tldr``).  Never imports a stage above it, never reads a reader."""
