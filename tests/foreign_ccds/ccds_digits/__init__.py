"""A cookiecutter-data-science project (tests/foreign_ccds/README.md)."""
