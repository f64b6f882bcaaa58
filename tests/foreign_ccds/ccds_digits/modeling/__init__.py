"""The model and its training (the template's ``modeling/``)."""
