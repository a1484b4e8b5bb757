"""Agent workflows that run through a hetflow stack via the client."""
