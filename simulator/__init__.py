"""The cluster simulator in virtual time (issue 4): engine_svc's engine model and balancer_svc's
decision pipeline, imported, not copied, driven by an event loop over a trace."""
