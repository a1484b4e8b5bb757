"""Deployment files written from a stack config: a compose file (``hetflow compose``)."""
