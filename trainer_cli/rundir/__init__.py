"""Where a run lives and what is in it: layout, plan/resume/freeze/discard, history, identity."""
