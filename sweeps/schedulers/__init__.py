"""Early stopping inside a unit: the schedulers Tune runs."""
