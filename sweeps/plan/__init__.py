"""What a launch will do, worked out once before anything starts."""
