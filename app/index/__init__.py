"""The vector index: one FAISS index per spec space, in step with the database, rebuildable."""
