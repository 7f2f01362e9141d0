"""sapo-edge: laptops post-train small language models together with SAPO (Swarm sAmpling Policy Optimization)."""

__version__ = "0.1.0"
