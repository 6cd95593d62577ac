"""Spec spaces: which spaces the dock serves, what a client needs to compute a compatible spec."""
