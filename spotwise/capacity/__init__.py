"""Capacity: who provides workers (the emulated market provider, a real Ray cluster), revocation notices, Ray start-up and fault injection."""
