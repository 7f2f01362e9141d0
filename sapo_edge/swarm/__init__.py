"""Swarm: how rollouts travel between nodes (in-process for the simulator; network later)."""
