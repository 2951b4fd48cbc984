"""The stages of a launch around the Tune run."""
