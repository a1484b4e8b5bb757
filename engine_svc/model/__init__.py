"""The engine model: continuous batching over paged KV blocks with preemption, timed by a profile.

The real-time ``sim`` backend and the virtual-time cluster simulator run this same code.
"""
