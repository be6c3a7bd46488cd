"""What a target is checked against: audit, environment, scan, service, units, wheels."""
