"""Datasets of episodes: RLDS recording and reading, and feeding them to replay."""
