"""The stages of a launch in order (``pipeline``): set-up, the Tune run, measure, confirm, publish,
results."""
