"""A user's Lightning project (tests only): no trainer_cli import anywhere in this package."""
