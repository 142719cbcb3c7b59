"""A scripted OpenAI-compatible model server for agent tests (see README.md)."""
