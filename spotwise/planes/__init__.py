"""Data planes: how workers exchange updates (parameter server, collective all-reduce, serverless functions through Redis)."""
