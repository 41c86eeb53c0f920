"""tfrl's programs: train_eval (one process); more come as separate programs."""
