"""The front door: argv and config files -> one parsed, checked run spec (no torch before the parser)."""
