"""What is recorded about a target: ledger, manifests, state dir, workspace history."""
