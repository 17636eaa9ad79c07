"""Turning series, event logs and summaries into tables, JSON and plots for people."""
