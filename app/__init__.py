"""pt2serde: serialization service for torch exported programs."""
