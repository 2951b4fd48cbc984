"""The launch: the stages run over one Tune experiment on Ray."""
