"""The artifact store: packages, predictions and other blobs, content-addressed by sha256."""
