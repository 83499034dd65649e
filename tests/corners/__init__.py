"""A bounded, seeded generator of exported programs shaped like torch's own export tests."""
