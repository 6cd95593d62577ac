"""The ``pavedock`` command line."""
