"""Plain data and what checks it: the task domains and their sampler, rollouts and their wire
checks, bounded JSON, host:port addresses, the app's folders, terminal-safe text. Imports
nothing else of sapo_edge: every other floor stands on it."""
