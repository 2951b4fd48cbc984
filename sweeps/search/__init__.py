"""The searchers that hand Tune the sweep's trials."""
