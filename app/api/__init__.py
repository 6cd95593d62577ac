"""The HTTP service: the app factory, the error handler, limits, health and metrics."""
