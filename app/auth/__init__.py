"""API keys: hashed storage, roles (developer, user, admin), expiry and revocation."""
