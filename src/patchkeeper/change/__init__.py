"""The change pipeline: plan, transaction, execute, mirror, verify, automatic rollback."""
