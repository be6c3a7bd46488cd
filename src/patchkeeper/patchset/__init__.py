"""Patch sets: read, apply to text, author, exchange, templates."""
