"""The round: sample, score, pick the peer groups to learn from, compute advantages and train
(trainer.py's Node), the adaptive mix and targeting, the Aha tags, a node's state for rollback,
save and resume, and the per-round metrics."""
